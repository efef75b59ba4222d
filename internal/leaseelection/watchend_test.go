package leaseelection

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasegate/leasegate/internal/kubeclient"
)

const oneEvent = `{"type":"MODIFIED","object":{"metadata":{"name":"orders","namespace":"shop","resourceVersion":"42"},"spec":{"holderIdentity":"a-0_ua"}}}` + "\n"

// TestClientWatchCutByItsConnectionEndsLikeTheServersEnd: an API server that restarts cuts its watches
// (an HTTP/2 GOAWAY and then the close, or an HTTP/1.1 connection closed mid-stream). The watch ends
// without an error, as when the server ends it, so the elector resumes at once from the last version
// seen instead of logging a failure and backing off; client-go's stream watcher does the same. The error
// the stream ended with is recorded, so each case is known to be the cut it names.
func TestClientWatchCutByItsConnectionEndsLikeTheServersEnd(t *testing.T) {
	tests := []struct {
		name    string
		serve   func(t *testing.T) (host string, caPEM []byte)
		wantCut string // in the error the response body's read ended with
	}{
		{name: "an HTTP/2 GOAWAY and the close, as an API server restarting sends", serve: goAwayServer, wantCut: "server sent GOAWAY and closed the connection"},
		{name: "an HTTP/1.1 connection closed mid-stream", serve: abortingServer, wantCut: "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host, caPEM := tt.serve(t)
			httpClient, err := (&kubeclient.Config{Host: host, CAData: caPEM}).HTTPClient()
			if err != nil {
				t.Fatal(err)
			}
			recorder := &bodyErrors{next: httpClient.Transport}
			api, err := kubeclient.NewForHTTPClient(host, &http.Client{Transport: recorder})
			if err != nil {
				t.Fatal(err)
			}
			got := watchToEnd(t, NewClient(api), "41")
			if len(got) != 1 || got[0].Type != Modified || got[0].Lease.ResourceVersion != "42" {
				t.Errorf("events %+v: want the one event and the end, no Error", got)
			}
			if cut := recorder.last(); cut == nil || !strings.Contains(cut.Error(), tt.wantCut) {
				t.Errorf("the stream ended with %v, want %q: the case does not test what it names", cut, tt.wantCut)
			}
		})
	}
}

// abortingServer answers a watch with one event, then closes the connection in the middle of the
// chunked body.
func abortingServer(t *testing.T) (string, []byte) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(oneEvent))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS() // HTTP/1.1: EnableHTTP2 is not set
	t.Cleanup(srv.Close)
	return srv.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// goAwayServer is an HTTP/2 server of one stream, written frame by frame so the order is certain: it
// answers the first request with one watch event, then sends GOAWAY (no error, the stream included, as
// a server shutting down does) and closes the connection.
func goAwayServer(t *testing.T) (string, []byte) {
	cert, caPEM := selfSigned(t)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		if err := serveOneStreamThenGoAway(conn); err != nil {
			t.Errorf("the HTTP/2 server: %v", err)
		}
	})
	return "https://" + l.Addr().String(), caPEM
}

// HTTP/2 frame types and flags (RFC 9113).
const (
	frameData, frameHeaders, frameSettings, frameGoAway = 0x0, 0x1, 0x4, 0x7
	flagAck, flagEndHeaders                             = 0x1, 0x4
)

func serveOneStreamThenGoAway(conn net.Conn) error {
	preface := make([]byte, len("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	if _, err := io.ReadFull(conn, preface); err != nil {
		return err
	}
	write := func(kind, flags byte, stream uint32, payload []byte) error {
		header := make([]byte, 9)
		header[0], header[1], header[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
		header[3], header[4] = kind, flags
		binary.BigEndian.PutUint32(header[5:], stream)
		_, err := conn.Write(append(header, payload...))
		return err
	}
	if err := write(frameSettings, 0, 0, nil); err != nil {
		return err
	}
	// Read the client's frames up to its request's HEADERS, acknowledging its SETTINGS.
	var stream uint32
	for stream == 0 {
		header := make([]byte, 9)
		if _, err := io.ReadFull(conn, header); err != nil {
			return err
		}
		payload := make([]byte, int(header[0])<<16|int(header[1])<<8|int(header[2]))
		if _, err := io.ReadFull(conn, payload); err != nil {
			return err
		}
		switch kind, flags := header[3], header[4]; {
		case kind == frameSettings && flags&flagAck == 0:
			if err := write(frameSettings, flagAck, 0, nil); err != nil {
				return err
			}
		case kind == frameHeaders:
			stream = binary.BigEndian.Uint32(header[5:]) & 0x7fffffff
		}
	}
	// 0x88: ":status: 200", entry 8 of HPACK's static table.
	if err := write(frameHeaders, flagEndHeaders, stream, []byte{0x88}); err != nil {
		return err
	}
	if err := write(frameData, 0, stream, []byte(oneEvent)); err != nil {
		return err
	}
	goAway := make([]byte, 8) // the last stream the server processed, then NO_ERROR
	binary.BigEndian.PutUint32(goAway, stream)
	return write(frameGoAway, 0, 0, goAway)
}

func selfSigned(t *testing.T) (tls.Certificate, []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// bodyErrors records the error each response body's read ended with, other than a clean end.
type bodyErrors struct {
	next http.RoundTripper
	mu   sync.Mutex
	errs []error
}

func (b *bodyErrors) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.next.RoundTrip(req)
	if err == nil {
		resp.Body = &recordedBody{ReadCloser: resp.Body, record: b}
	}
	return resp, err
}

func (b *bodyErrors) last() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errs) == 0 {
		return nil
	}
	return b.errs[len(b.errs)-1]
}

type recordedBody struct {
	io.ReadCloser
	record *bodyErrors
}

func (r *recordedBody) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		r.record.mu.Lock()
		r.record.errs = append(r.record.errs, err)
		r.record.mu.Unlock()
	}
	return n, err
}

// TestElectorResumesAWatchCutByItsConnectionAtOnce: an elector's watch, through the API client, is cut
// mid-stream after an event; the next watch asks for the version that event carried, with the elector's
// clock standing still, so no backoff was waited. A cut that counted as a failure would wait on the clock.
func TestElectorResumesAWatchCutByItsConnectionAtOnce(t *testing.T) {
	lease := func(rv string) string {
		return `{"metadata":{"name":"orders","namespace":"shop","resourceVersion":"` + rv + `"},` +
			`"spec":{"holderIdentity":"b-0_ub","leaseDurationSeconds":3,"renewTime":"2026-11-23T12:00:00.000000Z"}}`
	}
	resumedFrom := make(chan string, 1)
	var watches sync.Map
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch {
		case q.Get("watch") == "true":
			if _, again := watches.LoadOrStore("first", true); again {
				select {
				case resumedFrom <- q.Get("resourceVersion"):
				default:
				}
				<-r.Context().Done()
				return
			}
			if q.Get("sendInitialEvents") == "true" { // a streamed list: the lease, then the end of the list
				_, _ = w.Write([]byte(`{"type":"ADDED","object":` + lease("5") + "}\n" +
					`{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"5","annotations":{"k8s.io/initial-events-end":"true"}}}}` + "\n"))
			}
			_, _ = w.Write([]byte(`{"type":"MODIFIED","object":` + lease("6") + "}\n"))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection closes mid-stream
		case strings.HasSuffix(r.URL.Path, "/leases"):
			_, _ = w.Write([]byte(`{"metadata":{"resourceVersion":"5"},"items":[` + lease("5") + `]}`))
		default:
			_, _ = w.Write([]byte(lease("5")))
		}
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close) // after the elector's, which ends the watch the server waits on
	api, err := kubeclient.New(&kubeclient.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	runElector(t, NewClient(api), clocktesting.NewFakeClock(start), "a-0_ua")
	select {
	case rv := <-resumedFrom:
		if rv != "6" {
			t.Errorf("resumed from resourceVersion %q, want 6, the cut watch's last event", rv)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no second watch while the clock stood still: the cut was waited on as a failure")
	}
}
