package process

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/leasegate/leasegate/test/framework/checkout"
)

// Prometheus is a real Prometheus server (the pinned one `make prometheus` builds) run by the harness on
// loopback.
type Prometheus struct {
	URL     string
	process *Process
}

// StartPrometheus runs prometheus with config (prometheus.yml) and the files beside it written into dir,
// listening on a free loopback port, and waits until it is ready.
func StartPrometheus(ctx context.Context, dir, config string, files map[string][]byte) (*Prometheus, error) {
	binary, err := checkout.PrometheusServer()
	if err != nil {
		return nil, err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	configFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	process, err := StartProcess(exec.Command(binary, "--config.file="+configFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn"))
	if err != nil {
		return nil, err
	}
	p := &Prometheus{URL: "http://" + addr, process: process}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(p.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-process.Exited():
			return nil, fmt.Errorf("prometheus exited: %s", process.Logs())
		case <-ctx.Done():
			process.Stop()
			return nil, ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			process.Stop()
			return nil, fmt.Errorf("prometheus not ready at %s after 30 s: %s", p.URL, process.Logs())
		}
	}
}

// Stop ends the server.
func (p *Prometheus) Stop() { p.process.Terminate(5 * time.Second) }

// Logs is what the server wrote.
func (p *Prometheus) Logs() string { return p.process.Logs() }

// Sample is one series of a query's answer: its labels and its values ([time, "value"] pairs).
type Sample struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
	Values [][]any           `json:"values"`
}

// Float is an instant sample's value.
func (s Sample) Float() float64 {
	if len(s.Value) != 2 {
		return 0
	}
	str, _ := s.Value[1].(string)
	f, _ := strconv.ParseFloat(str, 64)
	return f
}

// Query evaluates expr now.
func (p *Prometheus) Query(ctx context.Context, expr string) ([]Sample, error) {
	var data struct {
		Result []Sample `json:"result"`
	}
	return data.Result, p.get(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data)
}

// QueryRange evaluates expr from start to end, a point every step.
func (p *Prometheus) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]Sample, error) {
	var data struct {
		Result []Sample `json:"result"`
	}
	return data.Result, p.get(ctx, "/api/v1/query_range", url.Values{
		"query": {expr}, "start": {strconv.FormatInt(start.Unix(), 10)}, "end": {strconv.FormatInt(end.Unix(), 10)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}, &data)
}

// LabelValues is what Grafana's label_values(match, label) lists.
func (p *Prometheus) LabelValues(ctx context.Context, match, label string) ([]string, error) {
	var values []string
	return values, p.get(ctx, "/api/v1/label/"+label+"/values", url.Values{"match[]": {match}}, &values)
}

// Alert is an alerting rule's alert as the server holds it: pending or firing.
type Alert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
}

// Alerts are the pending and firing alerts.
func (p *Prometheus) Alerts(ctx context.Context) ([]Alert, error) {
	var data struct {
		Alerts []Alert `json:"alerts"`
	}
	return data.Alerts, p.get(ctx, "/api/v1/alerts", nil, &data)
}

// Target is a scrape target and its health.
type Target struct {
	Labels    map[string]string `json:"labels"`
	Health    string            `json:"health"`
	LastError string            `json:"lastError"`
	ScrapeURL string            `json:"scrapeUrl"`
}

// Targets are the active scrape targets.
func (p *Prometheus) Targets(ctx context.Context) ([]Target, error) {
	var data struct {
		ActiveTargets []Target `json:"activeTargets"`
	}
	return data.ActiveTargets, p.get(ctx, "/api/v1/targets", url.Values{"state": {"active"}}, &data)
}

func (p *Prometheus) get(ctx context.Context, path string, query url.Values, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+path+"?"+query.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var answer struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Warnings  []string        `json:"warnings"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return fmt.Errorf("%s: %d %s", path, resp.StatusCode, body)
	}
	if answer.Status != "success" {
		return fmt.Errorf("%s %s: %s: %s", path, query.Get("query"), answer.ErrorType, answer.Error)
	}
	if len(answer.Warnings) > 0 {
		return fmt.Errorf("%s %s: warnings %v", path, query.Get("query"), answer.Warnings)
	}
	return json.Unmarshal(answer.Data, data)
}
