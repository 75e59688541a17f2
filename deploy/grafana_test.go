package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// dashboardMetrics are the metric names the target exports (the names the
// dashboard may use, and must: every one is on a panel).
var dashboardMetrics = []string{
	"rdisk_namespace_ops_total",
	"rdisk_namespace_bytes_total",
	"rdisk_namespace_latency_seconds",
	"rdisk_namespace_inflight",
	"rdisk_namespace_errors_total",
	"rdisk_port_connections",
	"rdisk_port_connections_accepted_total",
	"rdisk_port_connections_rejected_total",
	"rdisk_nvme_controllers",
	"rdisk_nvme_keepalive_expired_total",
	"rdisk_iscsi_sessions",
	"rdisk_srp_channels",
	"rdisk_iwarp_terminates_total",
	"rdisk_backstore_health_critical_warning",
	"rdisk_backstore_health_percentage_used",
}

// histograms are the dashboardMetrics that are histograms: their series
// are NAME_bucket, NAME_sum and NAME_count.
var histograms = []string{"rdisk_namespace_latency_seconds"}

// promQLFuncs are the PromQL functions and aggregations a dashboard
// expression may call.
var promQLFuncs = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "count": true, "topk": true, "bottomk": true, "quantile": true,
	"rate": true, "irate": true, "increase": true, "delta": true, "idelta": true, "deriv": true,
	"histogram_quantile": true, "clamp_min": true, "clamp_max": true, "abs": true, "vector": true, "scalar": true,
	"avg_over_time": true, "max_over_time": true, "min_over_time": true, "last_over_time": true, "changes": true, "resets": true,
	"label_replace": true, "absent": true, "time": true, "round": true,
}

// promQLKeywords are the PromQL words that are neither metrics nor
// functions.
var promQLKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true,
}

var (
	promStrings  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promVars     = regexp.MustCompile(`\$\{?\w+\}?`)
	promNumbers  = regexp.MustCompile(`(^|[^\w:])\d+(\.\d+)?([eE][+-]?\d+)?`)
	promIdents   = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	labelValues  = regexp.MustCompile(`^\s*label_values\(\s*(?:([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{[^}]*\})?\s*,\s*)?([A-Za-z_]\w*)\s*\)\s*$`)
)

// promQLMetrics returns the metric names of a PromQL expression, or an
// error for a function the test does not know. Label matchers, label lists
// (by, without, on...), ranges, strings and Grafana variables are dropped;
// what is left is functions (followed by "("), keywords and metric names.
func promQLMetrics(expr string) ([]string, error) {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		if m[1] == "" {
			return nil, nil
		}
		return []string{m[1]}, nil
	}
	s := promStrings.ReplaceAllString(expr, " ")
	s = promMatchers.ReplaceAllString(s, " ")
	s = promRanges.ReplaceAllString(s, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	s = promVars.ReplaceAllString(s, " ")
	s = promNumbers.ReplaceAllString(s, "$1 ")
	var out []string
	for _, loc := range promIdents.FindAllStringIndex(s, -1) {
		id := s[loc[0]:loc[1]]
		rest := strings.TrimLeft(s[loc[1]:], " \t\n")
		switch {
		case strings.HasPrefix(rest, "("):
			if !promQLFuncs[id] {
				return nil, fmt.Errorf("function %s( is not one the test knows", id)
			}
		case promQLKeywords[id]:
		default:
			out = append(out, id)
		}
	}
	return out, nil
}

// metricOf maps a series name to the exported metric it belongs to, or "".
func metricOf(name string) string {
	if slices.Contains(dashboardMetrics, name) && !slices.Contains(histograms, name) {
		return name
	}
	for _, h := range histograms {
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if name == h+suf {
				return h
			}
		}
	}
	return ""
}

type dashPanel struct {
	Type       string         `json:"type"`
	ID         int            `json:"id"`
	Title      string         `json:"title"`
	Datasource map[string]any `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr       string         `json:"expr"`
		RefID      string         `json:"refId"`
		Datasource map[string]any `json:"datasource"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

type dashboard struct {
	Title      string      `json:"title"`
	UID        string      `json:"uid"`
	Panels     []dashPanel `json:"panels"`
	Templating struct {
		List []struct {
			Type  string          `json:"type"`
			Name  string          `json:"name"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// TestDeployGrafanaDashboard decodes grafana/rdisk-dashboard.json and checks
// that every expression (panel queries and template variables) references
// only the target's metric names, that each of them is on some panel, and
// that the panels the dashboard promises are there.
func TestDeployGrafanaDashboard(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("grafana/rdisk-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("rdisk-dashboard.json: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: want both", d.Title, d.UID)
	}
	used := map[string]bool{}
	check := func(where, expr string) {
		names, err := promQLMetrics(expr)
		if err != nil {
			t.Errorf("%s: %q: %v", where, expr, err)
		}
		for _, n := range names {
			m := metricOf(n)
			if m == "" {
				t.Errorf("%s: %q references %s, which the target does not export", where, expr, n)
				continue
			}
			used[m] = true
		}
	}
	vars := map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type != "query" {
			continue
		}
		var q string
		var qo struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil {
			if err := json.Unmarshal(v.Query, &qo); err != nil {
				t.Errorf("variable %s: query %s: %v", v.Name, v.Query, err)
			}
			q = qo.Query
		}
		names, _ := promQLMetrics(q)
		if len(names) == 0 {
			t.Errorf("variable %s: query %q names no metric", v.Name, q)
		}
		check("variable "+v.Name, q)
	}
	ids := map[int]string{}
	var titles []string
	var walk func(ps []dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup {
				t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			if p.GridPos == nil {
				t.Errorf("panel %q has no gridPos", p.Title)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			titles = append(titles, p.Title)
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("panel %q: query %s has no expr", p.Title, tg.RefID)
				}
				check(fmt.Sprintf("panel %q query %s", p.Title, tg.RefID), tg.Expr)
				for _, v := range promVars.FindAllString(tg.Expr, -1) {
					if n := strings.Trim(v, "${}"); !vars[n] {
						t.Errorf("panel %q: %s is no variable of the dashboard", p.Title, v)
					}
				}
				for _, ds := range []map[string]any{p.Datasource, tg.Datasource} {
					if ds != nil && ds["uid"] != "${datasource}" {
						t.Errorf("panel %q: datasource %v, want the ${datasource} variable", p.Title, ds)
					}
				}
			}
		}
	}
	walk(d.Panels)
	for _, m := range dashboardMetrics {
		if !used[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
	// The panels promised: IOPS and bandwidth per namespace, latency p50
	// and p99, in flight, errors, connections, controllers/sessions,
	// health.
	for _, want := range []string{"IOPS per namespace", "Bandwidth per namespace", "p50", "p99", "In flight", "Errors",
		"Connections per port", "NVMe controllers", "Critical warning", "Percentage used"} {
		if !slices.ContainsFunc(titles, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("no panel titled with %q (panels: %q)", want, titles)
		}
	}
	if !strings.Contains(string(data), "histogram_quantile(0.99, sum by (instance, subsystem, nsid, op, le) (rate(rdisk_namespace_latency_seconds_bucket") {
		t.Error("no p99 over the latency histogram's buckets by le")
	}
}

// TestDeployPromQLMetrics checks the expression reader the dashboard test
// relies on.
func TestDeployPromQLMetrics(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr string
		want []string
		bad  bool
	}{
		{`sum by (subsystem, nsid, op) (rate(rdisk_namespace_ops_total{subsystem=~"$subsystem", op!="x{y}"}[$__rate_interval]))`, []string{"rdisk_namespace_ops_total"}, false},
		{`histogram_quantile(0.99, sum by (le) (rate(rdisk_namespace_latency_seconds_bucket[5m]))) * 1e3`, []string{"rdisk_namespace_latency_seconds_bucket"}, false},
		{`rate(a_total[1m]) / on (instance) group_left (x) b`, []string{"a_total", "b"}, false},
		{`sum(rate(x[1m])) or vector(0)`, []string{"x"}, false},
		{`label_values(rdisk_nvme_controllers{instance=~"$instance"}, subsystem)`, []string{"rdisk_nvme_controllers"}, false},
		{`label_values(instance)`, nil, false},
		{`frobnicate(x)`, nil, true},
	} {
		got, err := promQLMetrics(tc.expr)
		if (err != nil) != tc.bad || !slices.Equal(got, tc.want) {
			t.Errorf("promQLMetrics(%q) = %q, %v; want %q (error: %v)", tc.expr, got, err, tc.want, tc.bad)
		}
	}
	if metricOf("rdisk_namespace_latency_seconds") != "" || metricOf("rdisk_namespace_latency_seconds_bucket") == "" || metricOf("rdisk_namespace_ops") != "" {
		t.Error("metricOf: a histogram is only its _bucket, _sum and _count series")
	}
}
