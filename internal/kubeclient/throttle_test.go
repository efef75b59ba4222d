package kubeclient

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// held is how long the test gives requests that must not go out to go out anyway: without the probe,
// the requests held back by a Retry-After all arrive within microseconds of its end.
const held = 200 * time.Millisecond

// expiredRead is a client of handler whose reads were held back by a Retry-After that has just run
// out: the next read is the first after it.
func expiredRead(t *testing.T, handler http.HandlerFunc) *Client {
	client := serve(t, handler)
	client.throttle.hold(KindRead, time.Now().Add(-2*time.Second), time.Second)
	return client
}

// readConcurrently starts n reads with ctx and returns a wait for their errors.
func readConcurrently(ctx context.Context, client *Client, n int) func() []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = client.Do(ctx, Request{Method: http.MethodGet, Path: "/x"}, nil) })
	}
	return func() []error { wg.Wait(); return errs }
}

func TestOneReadProbesWhenARetryAfterRunsOutAndTheOthersWaitForItsAnswer(t *testing.T) {
	tests := []struct {
		name       string
		answer     func(w http.ResponseWriter) // the probe's answer
		wantOthers func(err error) bool
		wantShed   int // reads answered 429: the probe, when it is shed
		wantSent   int32
	}{
		{
			name:       "the probe is answered: the others go",
			answer:     func(w http.ResponseWriter) { _, _ = w.Write([]byte(`{}`)) },
			wantOthers: func(err error) bool { return err == nil },
			wantSent:   8,
		},
		{
			name: "the probe is shed again: the others wait out the new Retry-After unsent",
			answer: func(w http.ResponseWriter) {
				w.Header().Set("Retry-After", "60")
				w.WriteHeader(http.StatusTooManyRequests)
			},
			wantOthers: func(err error) bool {
				var throttled *ThrottledError
				return errors.As(err, &throttled) && throttled.Kind == KindRead && throttled.Wait > 50*time.Second
			},
			wantShed: 1,
			wantSent: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var reads atomic.Int32
			probeArrived, answer := make(chan struct{}), make(chan struct{})
			client := expiredRead(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodGet {
					_, _ = w.Write([]byte(`{}`))
					return
				}
				if reads.Add(1) == 1 {
					close(probeArrived)
					<-answer
					tt.answer(w)
					return
				}
				_, _ = w.Write([]byte(`{}`))
			})
			wait := readConcurrently(context.Background(), client, 8)
			<-probeArrived
			time.Sleep(held)
			if n := reads.Load(); n != 1 {
				t.Errorf("%d reads reached the server before the first was answered, want 1", n)
			}
			// Writes are another kind: the reads' probe does not hold them.
			if err := client.Do(context.Background(), Request{Method: http.MethodPut, Path: "/x", Body: "renewal"}, nil); err != nil {
				t.Errorf("a write while the reads' probe is out: %v", err)
			}
			close(answer)
			errs := wait()
			var shed int
			for _, err := range errs {
				var status *StatusError
				if errors.As(err, &status) {
					shed++
				} else if !tt.wantOthers(err) {
					t.Errorf("a read that waited for the probe: %v", err)
				}
			}
			if shed != tt.wantShed {
				t.Errorf("%d reads were answered 429, want %d: %v", shed, tt.wantShed, errs)
			}
			if n := reads.Load(); n != tt.wantSent {
				t.Errorf("%d reads reached the server, want %d", n, tt.wantSent)
			}
		})
	}
}

func TestAProbeThatGivesUpHandsTheProbeToTheNextRead(t *testing.T) {
	var reads atomic.Int32
	firstArrived, secondArrived, answerSecond := make(chan struct{}), make(chan struct{}), make(chan struct{})
	client := expiredRead(t, func(w http.ResponseWriter, r *http.Request) {
		switch reads.Add(1) {
		case 1:
			close(firstArrived)
			<-r.Context().Done() // its caller gives up before any answer
			return
		case 2:
			close(secondArrived)
			<-answerSecond
		}
		_, _ = w.Write([]byte(`{}`))
	})
	// Unblocks the handler before the server closes, should the test fail before it answers.
	answer := sync.OnceFunc(func() { close(answerSecond) })
	t.Cleanup(answer)
	probeCtx, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	first := readConcurrently(probeCtx, client, 1)
	<-firstArrived
	others := readConcurrently(context.Background(), client, 7)
	time.Sleep(held)
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d reads reached the server while the first was out, want 1", n)
	}

	giveUp()
	if err := first()[0]; !errors.Is(err, context.Canceled) {
		t.Errorf("the read that gave up: %v, want context.Canceled", err)
	}
	<-secondArrived
	time.Sleep(held)
	if n := reads.Load(); n != 2 {
		t.Errorf("%d reads reached the server while the second probe was out, want 2", n)
	}
	answer()
	for _, err := range others() {
		if err != nil {
			t.Errorf("a read after the second probe was answered: %v", err)
		}
	}
	if n := reads.Load(); n != 8 {
		t.Errorf("%d reads reached the server, want 8", n)
	}
}

func TestAReadWaitingForTheProbeEndsWithItsContext(t *testing.T) {
	probeArrived, answer := make(chan struct{}), make(chan struct{})
	defer close(answer)
	var reads atomic.Int32
	client := expiredRead(t, func(w http.ResponseWriter, _ *http.Request) {
		if reads.Add(1) == 1 {
			close(probeArrived)
			<-answer
		}
		_, _ = w.Write([]byte(`{}`))
	})
	probe := readConcurrently(context.Background(), client, 1)
	<-probeArrived
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := client.Do(ctx, Request{Method: http.MethodGet, Path: "/leases"}, nil)
	if !errors.Is(err, context.DeadlineExceeded) || reads.Load() != 1 {
		t.Errorf("a read whose deadline passes while the probe is out: %v after %d reads, want its deadline's error, unsent", err, reads.Load())
	}
	answer <- struct{}{}
	if err := probe()[0]; err != nil {
		t.Errorf("the probe: %v", err)
	}
}

// BenchmarkAdmit is what the Retry-After costs every request when the server asked for no wait (one
// atomic load), and while a wait runs (the lock and a clock read); neither allocates.
func BenchmarkAdmit(b *testing.B) {
	ctx := context.Background()
	b.Run("no hold", func(b *testing.B) {
		var t throttle
		b.ReportAllocs()
		for b.Loop() {
			if _, wait, err := t.admit(ctx, KindRead); wait > 0 || err != nil {
				b.Fatal(wait, err)
			}
		}
	})
	b.Run("held", func(b *testing.B) {
		var t throttle
		t.hold(KindRead, time.Now(), time.Hour)
		b.ReportAllocs()
		for b.Loop() {
			if _, wait, _ := t.admit(ctx, KindRead); wait == 0 {
				b.Fatal("not held")
			}
		}
	})
}
