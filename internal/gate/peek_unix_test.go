//go:build unix && !aix

package gate

import (
	"net"
	"testing"
	"time"
)

// TestQuiet peeks at a connection to the app as the pool does before it reuses one: quiet while the app
// neither sent nor closed, not after either, and quiet for a connection without a socket, which cannot be
// peeked at.
func TestQuiet(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	dial := func(t *testing.T) (client, app net.Conn) {
		client, err := net.Dial("tcp", listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		app, err = listener.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close(); app.Close() })
		return client, app
	}
	// eventually waits for what the app did to reach the client's socket.
	eventually := func(t *testing.T, conn net.Conn, want bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); quiet(conn) != want; {
			if time.Now().After(deadline) {
				t.Fatalf("quiet = %v, want %v", !want, want)
			}
			time.Sleep(time.Millisecond)
		}
	}

	t.Run("idle", func(t *testing.T) {
		client, _ := dial(t)
		if !quiet(client) {
			t.Error("quiet = false for a connection the app left alone")
		}
	})
	t.Run("the app closed it", func(t *testing.T) {
		client, app := dial(t)
		app.Close()
		eventually(t, client, false)
	})
	t.Run("the app sent something unasked", func(t *testing.T) {
		client, app := dial(t)
		if _, err := app.Write([]byte("HTTP/1.1 408 Request Timeout\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		eventually(t, client, false)
		var b [1]byte
		if n, err := client.Read(b[:]); n != 1 || err != nil {
			t.Errorf("the peek consumed what the app sent: Read = %d, %v", n, err)
		}
	})
	t.Run("no socket", func(t *testing.T) {
		client, app := net.Pipe()
		defer client.Close()
		defer app.Close()
		if !quiet(client) {
			t.Error("quiet = false for a connection that cannot be peeked at")
		}
	})
}
