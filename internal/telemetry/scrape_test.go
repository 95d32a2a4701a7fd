package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
)

func TestParseSnapshotVLLM(t *testing.T) {
	data, err := os.ReadFile("testdata/vllm_metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSnapshot(bytes.NewReader(data), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ttft := s.Families["vllm:time_to_first_token_seconds"]
	if ttft == nil || ttft.Count != 11 || math.Abs(ttft.Sum-2.05) > 1e-12 || ttft.Buckets[0.1] != 5 {
		t.Fatalf("ttft family %+v", ttft)
	}
	sc := &Scraper{model: "m1"}
	s, err = ParseSnapshot(bytes.NewReader(data), "", sc.keep)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Families["vllm:time_to_first_token_seconds"].Count; got != 10 {
		t.Errorf("model filter: count %v, want 10", got)
	}
	if got := s.Families["vllm:prefix_cache_hits_total"].Sum; got != 250 {
		t.Errorf("prefix hits %v", got)
	}
}

func TestParseSnapshotErrorsNameTheLine(t *testing.T) {
	_, err := ParseSnapshot(strings.NewReader("# TYPE x counter\nx{a=\"1\" 3\n"), "", nil)
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("err = %v, want one naming line 2", err)
	}
}

func FuzzParseSnapshot(f *testing.F) {
	data, _ := os.ReadFile("testdata/vllm_metrics.txt")
	f.Add(data)
	f.Add([]byte("a_total 1\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum 2\nh_count 1\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := ParseSnapshot(bytes.NewReader(in), "", nil)
		if err != nil {
			return
		}
		for name, ft := range s.Families {
			if ft == nil {
				t.Fatalf("family %q is nil", name)
			}
			BucketQuantile(0.9, ft.Buckets) // must not panic
		}
	})
}

func TestAddDeltaHandlesReset(t *testing.T) {
	acc := &FamilyTotal{}
	addDelta(acc, &FamilyTotal{Sum: 10, Count: 5}, &FamilyTotal{Sum: 16, Count: 8})
	addDelta(acc, &FamilyTotal{Sum: 16, Count: 8}, &FamilyTotal{Sum: 1, Count: 1}) // restart
	if acc.Sum != 7 || acc.Count != 4 {
		t.Fatalf("acc %+v, want sum 7 count 4", acc)
	}
	c := &FamilyTotal{}
	addDelta(c, &FamilyTotal{Sum: 100}, &FamilyTotal{Sum: 130})
	addDelta(c, &FamilyTotal{Sum: 130}, &FamilyTotal{Sum: 5}) // counter reset
	if c.Sum != 35 {
		t.Fatalf("counter acc %v, want 35", c.Sum)
	}
}

// TestBucketQuantileProperty: for samples drawn with a fixed seed, the
// bucket estimate lies within the bucket that holds the true quantile.
func TestBucketQuantileProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 1))
	les := append(slices.Clone(TTFTBuckets), math.Inf(1))
	for trial := range 50 {
		n := 1 + r.IntN(2000)
		xs := make([]float64, n)
		b := map[float64]float64{}
		for i := range xs {
			xs[i] = r.ExpFloat64() * 0.3
			for _, le := range les {
				if xs[i] <= le {
					b[le]++
				}
			}
		}
		slices.Sort(xs)
		for _, q := range []float64{0.5, 0.9, 0.95, 0.99} {
			truth := xs[int(math.Ceil(q*float64(n)))-1]
			got := BucketQuantile(q, b)
			lo, hi := 0.0, les[len(les)-2]
			for i, le := range les {
				if truth <= le {
					hi = le
					if i > 0 {
						lo = les[i-1]
					}
					break
				}
			}
			if math.IsInf(hi, 1) {
				hi = les[len(les)-2]
			}
			if got < lo-1e-9 || got > hi+1e-9 {
				t.Fatalf("trial %d q=%v: estimate %v outside [%v,%v] holding the true %v", trial, q, got, lo, hi, truth)
			}
		}
	}
	if !math.IsNaN(BucketQuantile(0.5, nil)) {
		t.Error("empty buckets must give NaN")
	}
}

// fakeEngine serves a vLLM-style exposition whose values a test advances,
// over a real loopback socket.
type fakeEngine struct {
	mu                         sync.Mutex
	n                          int
	ttftSum, queueSum, prefSum float64
	hits, queries, preemptions float64
	url                        string
	scrapes                    int
}

func (e *fakeEngine) serve(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.scrapes++
	hist := func(name string, sum float64) {
		fmt.Fprintf(w, "# TYPE %s histogram\n", name)
		fmt.Fprintf(w, "%s_bucket{model_name=\"m\",le=\"0.1\"} %d\n%s_bucket{model_name=\"m\",le=\"+Inf\"} %d\n", name, e.n/2, name, e.n)
		fmt.Fprintf(w, "%s_sum{model_name=\"m\"} %g\n%s_count{model_name=\"m\"} %d\n", name, sum, name, e.n)
	}
	hist("vllm:time_to_first_token_seconds", e.ttftSum)
	hist("vllm:request_queue_time_seconds", e.queueSum)
	hist("vllm:request_prefill_time_seconds", e.prefSum)
	fmt.Fprintf(w, "# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total{model_name=\"m\"} %g\n", e.hits)
	fmt.Fprintf(w, "# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total{model_name=\"m\"} %g\n", e.queries)
	fmt.Fprintf(w, "# TYPE vllm:num_preemptions counter\nvllm:num_preemptions_total{model_name=\"m\"} %g\n", e.preemptions)
}

func (e *fakeEngine) request(ttft, queue, prefill float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	e.ttftSum += ttft
	e.queueSum += queue
	e.prefSum += prefill
	e.hits += 10
	e.queries += 40
}

func startFakeEngine(t *testing.T) *fakeEngine {
	t.Helper()
	e := &fakeEngine{n: 100, ttftSum: 50, queueSum: 20, prefSum: 20, hits: 5, queries: 5, preemptions: 7}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(e.serve)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	e.url = "http://" + ln.Addr().String() + "/metrics"
	return e
}

func TestScraperDecomposition(t *testing.T) {
	eng := startFakeEngine(t)
	ctx := context.Background()
	s, err := StartScraper(ctx, eng.url, 20*time.Millisecond, "m", nil)
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	for i := range 20 {
		eng.request(0.2, 0.05, 0.12) // server: 200 ms = 50 queue + 120 prefill + 30 other
		rec := &record.Record{Sent: sent, FirstToken: sent.Add(230 * time.Millisecond),
			ServerTimings: map[string]float64{"prompt_ms": 100 + float64(i%2)*20}}
		s.Done(ctx, rec)
		if i == 10 {
			time.Sleep(50 * time.Millisecond) // let a periodic scrape land mid-run
		}
	}
	d := s.Stop(ctx)
	if d.Engine != "vllm" || d.ServerRequests != 20 || d.ClientN != 20 || d.Scrapes < 3 {
		t.Fatalf("decomposition %+v", d)
	}
	near := func(name string, got, want float64) {
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("server ttft", d.ServerTTFT, 0.2)
	near("queue", d.Queue, 0.05)
	near("prefill", d.Prefill, 0.12)
	near("client ttft", d.ClientTTFT, 0.23)
	near("prefix hits", d.PrefixHits, 200)
	near("prefix queries", d.PrefixQueries, 800)
	near("preemptions", d.Preemptions, 0)
	near("prompt_ms", d.ServerTimings["prompt_ms"], 110)
	text := strings.Join(d.Lines(), "\n")
	for _, want := range []string{"vllm names", "mean TTFT 230.0 ms (client) = queue 50.0 ms + prefill 120.0 ms + other server 30.0 ms + network+client 30.0 ms",
		"prefix cache 200/800 tokens hit (25.0%)", "preemptions 0", "prompt_ms 110.0"} {
		if !strings.Contains(text, want) {
			t.Errorf("lines lack %q:\n%s", want, text)
		}
	}
}

func TestScraperUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = StartScraper(context.Background(), "http://"+addr+"/metrics", time.Second, "", &http.Client{Timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("err = %v, want one naming %s", err, addr)
	}
}

func TestMetricsURLFor(t *testing.T) {
	cases := map[string]string{
		"http://127.0.0.1:8000":         "http://127.0.0.1:8000/metrics",
		"http://127.0.0.1:8000/v1":      "http://127.0.0.1:8000/metrics",
		"https://h.example/v1/chat?x=1": "https://h.example/metrics",
	}
	for in, want := range cases {
		got, err := MetricsURLFor(in)
		if err != nil || got != want {
			t.Errorf("MetricsURLFor(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := MetricsURLFor("127.0.0.1:8000"); err == nil {
		t.Error("no error for a URL without scheme")
	}
}
