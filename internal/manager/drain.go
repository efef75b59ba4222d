package manager

import (
	"context"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

// drainPeriod is how long the webhook goes on serving after SIGTERM, closing each connection after the
// request on it. The API server pools its keep-alive connections to a webhook by the Service's name and
// reuses them past the endpoint's removal, until the replica exits: a connection the server then closes
// as idle can close under a request the API server is writing on it, and that call fails (seen once in
// about 11,000 calls, a replica shutting down under load). Answered with "Connection: close", each
// pooled connection is closed by the exchange that used it, and the next call dials a replica that
// stays. The chart's preStop delay comes first, while the endpoint is removed.
const drainPeriod = 2 * time.Second

// draining is set from the first SIGTERM or SIGINT on.
var draining atomic.Bool

// SignalHandler returns a context that ends drainPeriod after SIGTERM or SIGINT, the webhooks closing
// every connection after its request meanwhile. A second signal exits at once, as controller-runtime's
// handler does.
func SignalHandler() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		draining.Store(true)
		select {
		case <-time.After(drainPeriod):
			cancel()
		case <-signals:
			os.Exit(1)
		}
		<-signals
		os.Exit(1)
	}()
	return ctx
}

// closeWhenDraining asks the client to close the connection after this request once draining.
func closeWhenDraining(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if draining.Load() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}
