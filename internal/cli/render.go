package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"
)

// Output formats of -o.
const (
	OutputTable = "table"
	OutputWide  = "wide"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

// Outputs are the formats -o accepts.
var Outputs = []string{OutputTable, OutputWide, OutputJSON, OutputYAML}

// newTable writes aligned columns as kubectl does.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 6, 4, 3, ' ', 0) }

// RenderStatus writes list in format.
func RenderStatus(w io.Writer, list *StatusList, format string) error {
	return renderStatus(w, list, format, true)
}

// renderStatus writes list, a table with its header or without (the rows --watch adds). The default
// table keeps to what an operator reads at a glance, in 120 columns for the usual names; -o wide adds the
// rest.
func renderStatus(w io.Writer, list *StatusList, format string, header bool) error {
	switch format {
	case OutputJSON, OutputYAML:
		return renderDocument(w, list, format)
	case OutputTable, OutputWide:
		if header && len(list.Items) == 0 {
			_, err := fmt.Fprintln(w, "No leases found: none in scope is managed by leasegate or named by a guard.")
			return err
		}
		t := newTable(w)
		if header {
			columns := "NAMESPACE\tLEASE\tHOLDER\tSTATE\tRENEWED\tREADY\tAGENTS"
			if format == OutputWide {
				columns += "\tSINCE\tTRANSITIONS\tCRASH TAKEOVER\tGUARDS\tDENIALS (1H)\tRENEW DEADLINE\tRETRY PERIOD\tNODE"
			}
			fmt.Fprintln(t, columns)
		}
		for i := range list.Items {
			fmt.Fprintln(t, statusRow(&list.Items[i], list.ObservedAt, format == OutputWide))
		}
		return t.Flush()
	}
	return fmt.Errorf("unknown output format %q: use one of %s", format, strings.Join(Outputs, ", "))
}

// renderDocument writes v as indented JSON or as YAML.
func renderDocument(w io.Writer, v any, format string) error {
	var data []byte
	var err error
	if format == OutputJSON {
		if data, err = json.MarshalIndent(v, "", "  "); err == nil {
			data = append(data, '\n')
		}
	} else {
		data, err = yaml.Marshal(v)
	}
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// statusRow is one lease's row: what an operator reads at a glance.
func statusRow(s *LeaseStatus, now time.Time, wide bool) string {
	holder := s.HolderPod
	if holder == "" {
		holder = orNone(s.Holder)
	}
	ready := 0
	for _, c := range s.Candidates {
		if c.Ready {
			ready++
		}
	}
	cells := []string{
		s.Namespace, s.Name, holder, s.State, fmt.Sprintf("%s/%ds", age(s.RenewTime, now), s.LeaseDurationSeconds),
		fmt.Sprintf("%d/%d", ready, len(s.Candidates)), s.Verdict,
	}
	if wide {
		node := ""
		for _, c := range s.Candidates {
			if c.Pod == s.HolderPod {
				node = c.Node
			}
		}
		cells = append(cells, age(s.Since, now), strconv.Itoa(int(s.Transitions)),
			(time.Duration(s.CrashTakeoverSeconds * float64(time.Second))).String(),
			orNone(strings.Join(s.Guards, ",")), strconv.Itoa(s.DenialsLastHour),
			orNone(s.RenewDeadline), orNone(s.RetryPeriod), orNone(node))
	}
	return strings.Join(cells, "\t")
}

// age is how long before now t was, as kubectl prints ages; "<none>" without a time.
func age(t *time.Time, now time.Time) string {
	if t == nil {
		return "<none>"
	}
	return duration.HumanDuration(now.Sub(*t))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
