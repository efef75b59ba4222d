package observe

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math"
	"net/http"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics are the metric families of one scrape of a Prometheus /metrics endpoint.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics reads the Prometheus text format.
func ParseMetrics(text []byte) (Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(bytes.NewReader(text))
}

// Sum adds up the counters and gauges of family name whose labels include every one of labels.
func (m Metrics) Sum(name string, labels map[string]string) float64 {
	var sum float64
	for _, metric := range m.matching(name, labels) {
		sum += metric.GetCounter().GetValue() + metric.GetGauge().GetValue()
	}
	return sum
}

// Quantile estimates the q-quantile (0 < q < 1) of the histograms of family name whose labels include
// labels, merged, as PromQL's histogram_quantile does: linear interpolation inside the bucket the rank
// falls in. It returns the number of observations too; with none the quantile is NaN.
func (m Metrics) Quantile(name string, labels map[string]string, q float64) (quantile float64, observations uint64) {
	return m.QuantileSince(nil, name, labels, q)
}

// QuantileSince is Quantile of the observations made between the scrape before and this one, as PromQL's
// histogram_quantile over an increase. A nil before counts every observation.
func (m Metrics) QuantileSince(before Metrics, name string, labels map[string]string, q float64) (quantile float64, observations uint64) {
	cumulative := map[float64]uint64{}
	for _, metric := range m.matching(name, labels) {
		h := metric.GetHistogram()
		observations += h.GetSampleCount()
		for _, b := range h.GetBucket() {
			cumulative[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	for _, metric := range before.matching(name, labels) {
		h := metric.GetHistogram()
		observations -= h.GetSampleCount()
		for _, b := range h.GetBucket() {
			cumulative[b.GetUpperBound()] -= b.GetCumulativeCount()
		}
	}
	if observations == 0 {
		return math.NaN(), 0
	}
	bounds := make([]float64, 0, len(cumulative))
	for bound := range cumulative {
		bounds = append(bounds, bound)
	}
	sort.Float64s(bounds)
	rank := q * float64(observations)
	lower, below := 0.0, uint64(0)
	for _, upper := range bounds {
		if count := cumulative[upper]; float64(count) >= rank {
			if math.IsInf(upper, 1) || count == below {
				return lower, observations
			}
			return lower + (upper-lower)*(rank-float64(below))/float64(count-below), observations
		}
		lower, below = upper, cumulative[upper]
	}
	return lower, observations // the rank is above every finite bucket: its lower bound, as PromQL
}

func (m Metrics) matching(name string, labels map[string]string) []*dto.Metric {
	family, ok := m[name]
	if !ok {
		return nil
	}
	var matched []*dto.Metric
	for _, metric := range family.GetMetric() {
		found := 0
		for _, pair := range metric.GetLabel() {
			if want, ok := labels[pair.GetName()]; ok && want == pair.GetValue() {
				found++
			}
		}
		if found == len(labels) {
			matched = append(matched, metric)
		}
	}
	return matched
}

// WebhookClient is an HTTPS client that trusts only caPEM and checks the certificate names
// leasegate-webhook's Service in namespace, as the API server and a ServiceMonitor do.
func WebhookClient(caPEM []byte, namespace string) (*http.Client, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no CA certificate in the PEM given")
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, ServerName: "leasegate-webhook." + namespace + ".svc", MinVersion: tls.VersionTLS12,
	}}}, nil
}

// GetWithToken GETs url with a bearer token ("" sends none) and returns the status and the body.
func GetWithToken(ctx context.Context, client *http.Client, url, token string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}
