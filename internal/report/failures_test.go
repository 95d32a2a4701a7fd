package report

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

func htmlOf(t *testing.T, runs []Run) string {
	t.Helper()
	var buf bytes.Buffer
	if err := Build(runs, Options{}).WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// figcaption returns the caption of chart id in a page.
func figcaption(t *testing.T, page, id string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<figure id="fig-` + id + `">.*?<figcaption>(.*?)</figcaption>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no figure %s in the page", id)
	}
	return m[1]
}

// TestReportShowsFailures: 87 of 100 requests failed. The page says so
// before anything else about the run, with each error class, its count and
// its first message, and every chart of completed requests says how many
// it leaves out.
func TestReportShowsFailures(t *testing.T) {
	run := failingRun("flaky", 100, 87, 3)
	if run.Summary.Requests.Failed != 87 {
		t.Fatalf("fixture: %d failed", run.Summary.Requests.Failed)
	}
	page := htmlOf(t, []Run{run})
	errAt := strings.Index(page, `id="errors-0"`)
	if errAt < 0 {
		t.Fatal("no error section for the run")
	}
	if sum := strings.Index(page, `id="summary"`); sum < errAt {
		t.Error("the error section comes after the summary table; it must be at the top")
	}
	section := page[errAt:]
	section = section[:strings.Index(section, "</section>")]
	for _, want := range []string{"87 of 100 requests failed", ">timeout<", ">78<", ">http_status<", ">9<",
		"context deadline exceeded (Client.Timeout exceeded while awaiting headers)", "model is overloaded"} {
		if !strings.Contains(section, want) {
			t.Errorf("error section lacks %q:\n%s", want, section)
		}
	}
	for _, id := range []string{"ttft_cdf", "ttft_hist", "ttft_time", "e2e_cdf"} {
		if c := figcaption(t, page, id); !strings.Contains(c, "13 of 100 requests; 87 failed and are not in this chart") {
			t.Errorf("caption of %s hides the failures: %q", id, c)
		}
	}
	if c := figcaption(t, page, "itl_cdf"); !strings.Contains(c, "gaps of 13 of 100 requests; 87 failed and are not in this chart") {
		t.Errorf("caption of itl_cdf hides the failures: %q", c)
	}
	if c := figcaption(t, page, "inflight_time"); !strings.Contains(c, "all 100 requests, the 87 failed ones included") {
		t.Errorf("caption of inflight_time: %q", c)
	}
	// The summary table says what share failed.
	if !strings.Contains(page, ">87 (87%)</td>") {
		t.Error("summary table does not show the failed share")
	}
}

// TestReportAllFailed: every request failed. There is no TTFT to show —
// not 0.00 — and the run does have per-request records.
func TestReportAllFailed(t *testing.T) {
	run := failingRun("down", 100, 100, 4)
	page := htmlOf(t, []Run{run})
	if strings.Contains(page, "no per-request records") {
		t.Error("an all-failed run with 100 records is said to have no per-request records")
	}
	if !strings.Contains(page, "100 of 100 requests failed") || !strings.Contains(page, "no request completed") {
		t.Error("the page does not say that no request completed")
	}
	row := regexp.MustCompile(`(?s)<table id="summary">.*?</table>`).FindString(page)
	if strings.Contains(row, "0.00") {
		t.Errorf("summary shows a statistic of no sample:\n%s", row)
	}
	slo := regexp.MustCompile(`(?s)<table id="slo">.*?</table>`).FindString(page)
	if strings.Contains(slo, "0.00") || !strings.Contains(slo, "no completed request") {
		t.Errorf("SLO table shows a value of no sample:\n%s", slo)
	}
	// Charts of completed requests are absent; the load chart stays.
	for _, id := range []string{"ttft_cdf", "ttft_hist", "itl_cdf", "e2e_cdf"} {
		if strings.Contains(page, `id="fig-`+id+`"`) {
			t.Errorf("chart %s drawn for a run with no completed request", id)
		}
	}
}

// TestCompareShowsFailures: compare's text names the failures too, shows
// no statistic without a sample, and says why an all-failed run cannot be
// compared.
func TestCompareShowsFailures(t *testing.T) {
	ok := fakeRun("ok", 100, 1, 60, 10, nil)
	flaky := failingRun("flaky", 100, 87, 3)
	down := failingRun("down", 100, 100, 4)
	cmp := Compare([]Run{ok, flaky, down}, CompareOptions{})
	var buf bytes.Buffer
	if err := cmp.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"flaky: 87 of 100 requests failed", "timeout 78", `first: "Post \"http://gpu-7:8000`, "http_status 9",
		"down: 100 of 100 requests failed", "no completed request"} {
		if !strings.Contains(out, want) {
			t.Errorf("compare text lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "down ") && strings.Contains(line, "0.00") {
			t.Errorf("row of the all-failed run shows 0.00: %q", line)
		}
	}
	for _, d := range cmp.Diffs {
		if d.Run == "flaky" && !strings.Contains(d.Verdict, "failed requests not compared: 2 of 100 of ok, 87 of 100 of flaky") {
			t.Errorf("verdict on a run with 87%% failures does not say so: %s", d.Verdict)
		}
		if d.Run == "down" && !strings.Contains(d.Verdict, "down has no completed request") {
			t.Errorf("verdict on an all-failed run: %s", d.Verdict)
		}
	}
	// --json works with rows that have no statistic.
	if _, err := json.Marshal(cmp); err != nil {
		t.Errorf("compare --json: %v", err)
	}
}

// TestCompareJSONWithPrunedRun: a run without records has NaN differences;
// they are null in JSON, not a marshalling error.
func TestCompareJSONWithPrunedRun(t *testing.T) {
	a := fakeRun("A", 100, 1, 100, 10, nil)
	b := fakeRun("B", 100, 2, 60, 10, nil)
	b.Records = nil
	if _, err := json.Marshal(Compare([]Run{a, b}, CompareOptions{})); err != nil {
		t.Fatalf("compare --json of a pruned run: %v", err)
	}
}
