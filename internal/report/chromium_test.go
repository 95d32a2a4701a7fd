package report

import (
	"context"
	"os"
	"path/filepath"
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

// TestReportInChromium loads a generated report in real headless Chromium:
// it must load with no console error or exception, request nothing but
// itself, and draw every chart with a non-zero size and visible shapes.
func TestReportInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	exe := testutil.Binary(t, "TTFT_CHROMIUM", "chromium", "apt-get install chromium (see .ci/install-chromium.sh)")

	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	rep := Build(sweepRuns(500), Options{Generated: t0, Charts: ChartOptions{Pareto: paretoPoints}})
	f, err := os.Create(page)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteHTML(f); err != nil {
		t.Fatal(err)
	}
	f.Close()

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

	type shape struct {
		ID     string  `json:"id"`
		W      float64 `json:"w"`
		H      float64 `json:"h"`
		Shapes int     `json:"shapes"`
		Texts  int     `json:"texts"`
	}
	runCtx, cancelRun := context.WithTimeout(ctx, 60*time.Second)
	defer cancelRun()
	if err := chromedp.Do(ctx); err != nil { // starts the browser outside the timeout
		t.Fatal(err)
	}
	if err := chromedp.Do(runCtx, chromedp.Navigate("file://"+page)); err != nil {
		t.Fatal(err)
	}
	charts, err := chromedp.Run(runCtx, chromedp.Evaluate[[]shape](`[...document.querySelectorAll('svg.chart')].map(s => {
		const r = s.getBoundingClientRect();
		const drawn = [...s.querySelectorAll('path, rect, circle')].filter(e => { const b = e.getBBox(); return b.width > 0 || b.height > 0; });
		return {id: s.id, w: r.width, h: r.height, shapes: drawn.length, texts: s.querySelectorAll('text').length};
	})`))
	if err != nil {
		t.Fatal(err)
	}
	title, err := chromedp.Run(runCtx, chromedp.Evaluate[string](`document.title`))
	if err != nil {
		t.Fatal(err)
	}
	// Let late console messages arrive before judging.
	time.Sleep(300 * time.Millisecond)

	if title != "ttft report" {
		t.Errorf("title %q", title)
	}
	if len(charts) != len(rep.Charts) {
		t.Fatalf("browser sees %d charts, want %d", len(charts), len(rep.Charts))
	}
	for _, c := range charts {
		if c.W < 100 || c.H < 100 || c.Shapes < 5 || c.Texts < 3 {
			t.Errorf("chart %s not rendered: %+v", c.ID, c)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("console problems: %s", strings.Join(problems, "; "))
	}
	for _, u := range requests {
		if u != "file://"+page {
			t.Errorf("the report requested %s (must be self-contained)", u)
		}
	}
}
