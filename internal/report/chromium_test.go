package report

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/ttft-dev/ttft/internal/testutil"
)

// chromiumCase is one report the browser test loads.
type chromiumCase struct {
	name string
	runs []Run
	opt  Options
}

// TestReportInChromium loads generated reports in real headless Chromium:
// each must load with no console error or exception, request nothing but
// itself, and draw every chart with a non-zero size and visible shapes.
// Then what a reader sees is checked: a run's failures are shown above its
// summary, with the failed share on the chart captions; an all-failed run
// says that no request completed; CDF axes end at 1; the per-turn axis has
// a tick at each turn; the load charts (requests in flight, tokens/s) and
// the end-to-end and TPOT distributions are drawn.
//
// TTFT_SCREENSHOTS=DIR also writes a full-page PNG of each report and one
// PNG per chart into DIR, to look at.
func TestReportInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	exe := testutil.Binary(t, "TTFT_CHROMIUM", "chromium", "apt-get install chromium (see .ci/install-chromium.sh)")
	shots := os.Getenv("TTFT_SCREENSHOTS")

	multi := fakeRun("multi-turn", 400, 7, 80, 10, nil)
	cases := []chromiumCase{
		{"healthy", sweepRuns(500), Options{Generated: t0, Charts: ChartOptions{Pareto: paretoPoints}}},
		{"failures87", []Run{failingRun("flaky", 100, 87, 3)}, Options{Generated: t0}},
		{"allfailed", []Run{failingRun("down", 100, 100, 4)}, Options{Generated: t0}},
		{"multiturn", []Run{multi}, Options{Generated: t0}},
	}

	profile, err := os.MkdirTemp("", "ttft-chromium-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Chromium's children may still write for a moment after exit.
		for range 50 {
			if os.RemoveAll(profile) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	// Flags from docs/reference: headless, no sandbox as root, and no
	// background networking (the machine has no network to try).
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(profile),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()

	var mu sync.Mutex
	var problems, requests []string
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			problems = append(problems, "exception: "+e.ExceptionDetails.Text)
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning {
				problems = append(problems, "console."+string(e.Type))
			}
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError || e.Entry.Level == log.EntryLevelWarning {
				problems = append(problems, "log "+string(e.Entry.Level)+": "+e.Entry.Text)
			}
		case *network.EventRequestWillBeSent:
			requests = append(requests, e.Request.URL)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx); err != nil { // starts the browser outside the timeouts
		t.Fatal(err)
	}

	dir := t.TempDir()
	var pages []string
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			page := filepath.Join(dir, tc.name+".html")
			pages = append(pages, "file://"+page)
			rep := Build(tc.runs, tc.opt)
			f, err := os.Create(page)
			if err != nil {
				t.Fatal(err)
			}
			if err := rep.WriteHTML(f); err != nil {
				t.Fatal(err)
			}
			f.Close()
			runCtx, cancelRun := context.WithTimeout(ctx, 60*time.Second)
			defer cancelRun()
			if err := chromedp.Do(runCtx, chromedp.EmulateViewport(1200, 900), chromedp.Navigate("file://"+page)); err != nil {
				t.Fatal(err)
			}
			seen := inspectPage(t, runCtx)
			checkPage(t, tc.name, rep, seen)
			if shots != "" {
				screenshots(t, runCtx, shots, tc.name, rep)
			}
		})
	}
	// Let late console messages arrive before judging.
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("console problems: %s", strings.Join(problems, "; "))
	}
	for _, u := range requests {
		if !slices.Contains(pages, u) {
			t.Errorf("the report requested %s (must be self-contained)", u)
		}
	}
}

// seenChart is what the browser laid out of one chart.
type seenChart struct {
	ID     string  `json:"id"`
	W      float64 `json:"w"`
	H      float64 `json:"h"`
	Shapes int     `json:"shapes"`
	// Marks are the drawn data: lines, dots, bars and cells (not the
	// background or the legend).
	Marks  int      `json:"marks"`
	Texts  int      `json:"texts"`
	XTicks []string `json:"xticks"`
	YTicks []string `json:"yticks"`
	// Caption is the figure's caption as rendered text.
	Caption string `json:"caption"`
}

// seenPage is what a reader sees of a report.
type seenPage struct {
	Title  string      `json:"title"`
	Charts []seenChart `json:"charts"`
	// Errors: the failures sections, top and height in CSS pixels, and text.
	Errors []struct {
		Top  float64 `json:"top"`
		H    float64 `json:"h"`
		Text string  `json:"text"`
	} `json:"errors"`
	SummaryTop  float64 `json:"summaryTop"`
	SummaryText string  `json:"summaryText"`
	Text        string  `json:"text"`
}

func inspectPage(t *testing.T, ctx context.Context) seenPage {
	t.Helper()
	// Tick labels: grey text right under the plot (x) or right-aligned
	// left of it (y), as drawChart places them.
	seen, err := chromedp.Run(ctx, chromedp.Evaluate[seenPage](`(() => {
		const top = e => e.getBoundingClientRect().top + window.scrollY;
		const charts = [...document.querySelectorAll('svg.chart')].map(s => {
			const r = s.getBoundingClientRect();
			const drawn = [...s.querySelectorAll('path, rect, circle')].filter(e => { const b = e.getBBox(); return b.width > 0 || b.height > 0; });
			const marks = drawn.filter(e => {
				if (e.tagName !== 'rect') return true;
				const b = e.getBBox();
				return b.width < `+strconv.Itoa(chartW)+` && !(b.width === 14 && b.height === 8) && e.getAttribute('fill') !== '#ffffff';
			});
			const texts = [...s.querySelectorAll('text')];
			const fig = s.closest('figure');
			return {id: s.id, w: r.width, h: r.height, shapes: drawn.length, marks: marks.length, texts: texts.length,
				xticks: texts.filter(e => e.getAttribute('y') === '`+strconv.Itoa(chartH-padB+16)+`.0' && e.getAttribute('fill') === '#6e6e6e').map(e => e.textContent),
				yticks: texts.filter(e => e.getAttribute('x') === '`+strconv.Itoa(padL-6)+`.0' && e.getAttribute('text-anchor') === 'end').map(e => e.textContent),
				caption: fig ? fig.querySelector('figcaption').innerText : ''};
		});
		const errors = [...document.querySelectorAll('section.errors')].map(e => ({top: top(e), h: e.getBoundingClientRect().height, text: e.innerText}));
		const sum = document.getElementById('summary');
		return {title: document.title, charts, errors, summaryTop: sum ? top(sum) : -1, summaryText: sum ? sum.innerText : '', text: document.body.innerText};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	return seen
}

func checkPage(t *testing.T, name string, rep *Report, seen seenPage) {
	t.Helper()
	if seen.Title != "ttft report" {
		t.Errorf("title %q", seen.Title)
	}
	if len(seen.Charts) != len(rep.Charts) {
		t.Fatalf("browser sees %d charts, want %d", len(seen.Charts), len(rep.Charts))
	}
	byID := map[string]seenChart{}
	for _, c := range seen.Charts {
		byID[strings.TrimPrefix(c.ID, "chart-")] = c
		if c.W < 100 || c.H < 100 || c.Marks < 1 || c.Shapes < 3 || c.Texts < 3 || (len(rep.Runs) > 1 && c.Shapes < 5) {
			t.Errorf("chart %s not rendered: %+v", c.ID, c)
		}
	}
	for id, c := range byID {
		if strings.HasSuffix(id, "_cdf") && (len(c.YTicks) == 0 || c.YTicks[len(c.YTicks)-1] != "1") {
			t.Errorf("%s: y axis ticks %v, want them to end at 1", id, c.YTicks)
		}
	}
	switch name {
	case "healthy":
		for _, id := range []string{"ttft_cdf", "itl_cdf", "tpot_cdf", "e2e_cdf", "inflight_time", "tokens_time", "ttft_turn", "sweep", "heatmap", "pareto"} {
			if _, ok := byID[id]; !ok {
				t.Errorf("chart %s missing", id)
			}
		}
		if len(seen.Errors) != 4 { // fakeRun fails 2% of its requests
			t.Errorf("%d failures sections, want one per run (4)", len(seen.Errors))
		}
	case "failures87":
		if len(seen.Errors) != 1 || seen.Errors[0].H < 40 {
			t.Fatalf("failures section not shown: %+v", seen.Errors)
		}
		e := seen.Errors[0]
		if e.Top > seen.SummaryTop {
			t.Errorf("the failures are shown below the summary (at %v px, summary at %v px)", e.Top, seen.SummaryTop)
		}
		for _, want := range []string{"87 of 100 requests failed", "timeout", "78", "http_status", "context deadline exceeded", "model is overloaded"} {
			if !strings.Contains(e.Text, want) {
				t.Errorf("failures section lacks %q: %q", want, e.Text)
			}
		}
		for _, id := range []string{"ttft_cdf", "ttft_hist", "ttft_time", "e2e_cdf", "tpot_cdf", "tokens_time"} {
			if c := byID[id].Caption; !strings.Contains(c, "13 of 100 requests; 87 failed and are not in this chart") {
				t.Errorf("%s caption hides the failures: %q", id, c)
			}
		}
		if c := byID["inflight_time"].Caption; !strings.Contains(c, "87 failed ones included") {
			t.Errorf("inflight_time caption: %q", c)
		}
	case "allfailed":
		if strings.Contains(seen.Text, "no per-request records") {
			t.Error("the page says an all-failed run has no per-request records")
		}
		if !strings.Contains(seen.Text, "no request completed") || len(seen.Errors) != 1 {
			t.Error("the page does not say that no request completed")
		}
		if strings.Contains(seen.SummaryText, "0.00") {
			t.Errorf("the summary shows statistics of no sample: %q", seen.SummaryText)
		}
		if _, ok := byID["ttft_cdf"]; ok {
			t.Error("a TTFT CDF is drawn with no completed request")
		}
	case "multiturn":
		if got := byID["ttft_turn"].XTicks; !slices.Equal(got, []string{"1", "2", "3", "4", "5"}) {
			t.Errorf("turn axis ticks %v, want 1 to 5", got)
		}
		if len(seen.Errors) != 1 { // 2% failed
			t.Errorf("%d failures sections, want 1", len(seen.Errors))
		}
	}
}

// screenshots writes the whole page and each chart as PNG into dir.
func screenshots(t *testing.T, ctx context.Context, dir, name string, rep *Report) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	full, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), full, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Charts {
		b, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS("#fig-"+c.ID)))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+"-"+c.ID+".png"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
