package process

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/leasegate/leasegate/internal/lease"
)

// LeaderEvent is one server-sent event of an agent's /leader stream, and when the client read it.
type LeaderEvent struct {
	Name   string
	Status lease.Status
	At     time.Time
}

// EventStream follows an agent's GET /leader as server-sent events (Accept: text/event-stream), as an app
// would, recording every event from the first (the state).
type EventStream struct {
	cancel context.CancelFunc

	mu      sync.Mutex
	events  []LeaderEvent
	arrived chan struct{} // closed at the next event, or when the stream ends
	ended   bool
	err     error
	next    int
}

// FollowEvents opens the agent's event stream and reads it until Stop, or until the agent ends it.
func (a *Agent) FollowEvents(path string) (*EventStream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+path, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("GET %s with Accept: text/event-stream: %s, Content-Type %q", path, resp.Status, resp.Header.Get("Content-Type"))
	}
	s := &EventStream{cancel: cancel, arrived: make(chan struct{})}
	go s.read(resp)
	return s, nil
}

func (s *EventStream) read(resp *http.Response) {
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	var name, data string
	var err error
	for {
		var line string
		if line, err = r.ReadString('\n'); err != nil {
			break
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		case line == "" && name != "":
			e := LeaderEvent{Name: name, At: time.Now()}
			if jerr := json.Unmarshal([]byte(data), &e.Status); jerr != nil {
				err = fmt.Errorf("event %s: %w: %s", name, jerr, data)
			}
			s.mu.Lock()
			s.events = append(s.events, e)
			close(s.arrived)
			s.arrived = make(chan struct{})
			s.mu.Unlock()
			name, data = "", ""
		}
		if err != nil {
			break
		}
	}
	s.mu.Lock()
	s.ended, s.err = true, err
	close(s.arrived)
	s.mu.Unlock()
}

// Stop closes the stream.
func (s *EventStream) Stop() { s.cancel() }

// Events is every event read so far.
func (s *EventStream) Events() []LeaderEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]LeaderEvent(nil), s.events...)
}

// Next waits up to timeout for the first event, after those Next already returned or passed over, that
// match accepts.
func (s *EventStream) Next(timeout time.Duration, match func(LeaderEvent) bool) (LeaderEvent, error) {
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		for ; s.next < len(s.events); s.next++ {
			if e := s.events[s.next]; match(e) {
				s.next++
				s.mu.Unlock()
				return e, nil
			}
		}
		arrived, ended, err := s.arrived, s.ended, s.err
		s.mu.Unlock()
		if ended {
			return LeaderEvent{}, fmt.Errorf("the event stream ended (%v)", err)
		}
		select {
		case <-arrived:
		case <-deadline:
			return LeaderEvent{}, fmt.Errorf("no such event within %s", timeout)
		}
	}
}

// WaitEnd waits up to timeout for the agent to end the stream, and returns how it ended: nil for a clean
// end (EOF).
func (s *EventStream) WaitEnd(timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		arrived, ended, err := s.arrived, s.ended, s.err
		s.mu.Unlock()
		if ended {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("the stream ended with %w", err)
		}
		select {
		case <-arrived:
		case <-deadline:
			return fmt.Errorf("the stream did not end within %s", timeout)
		}
	}
}
