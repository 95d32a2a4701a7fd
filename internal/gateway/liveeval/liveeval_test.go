package liveeval

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"strconv"
	"testing"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/workload"
)

// TestLiveTargets is the suite's short version, for CI: two stand-in
// fleets where prefix caching sets round-robin's tail (small-cache, two),
// two seeds, shorter runs, the default policy beside round-robin and
// the two single-signal policies, all through the real gateway over HTTP.
//
// Issue 17's targets (the default's P99 within 10% of the better
// single-signal policy's, at most a third of round-robin's) are logged
// with the figures, not asserted: the P99 of 250 requests on a shared
// 2-core machine moves by tens of percent from run to run for every
// policy (docs/routing-evaluation.md gives the 5-seed figures and their
// spread). What is asserted is what makes those targets reachable and
// holds with margin run after run — medians over the seeds: the default
// keeps prompts where they are cached (cache hit rate within 10 points of
// prefix affinity's) and beats round-robin's mean TTFT by a wide margin
// (at most 0.6× of it). The default before issue 17 (slo-latency), which
// spread prompt groups over every backend, fails the first: 56% against
// prefix affinity's 82% on small-cache.
func TestLiveTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("live runs take seconds")
	}
	var fleets []Fleet
	for _, f := range Fleets() {
		if f.Name == "small-cache" || f.Name == "two" {
			f.Workload.Requests = 250
			fleets = append(fleets, f)
		}
	}
	if len(fleets) != 2 {
		t.Fatalf("suite lacks its fleets: %v", FleetNames())
	}
	pols := []string{sched.RoundRobin, sched.LeastOutstanding, sched.PrefixAffinity, sched.SLOPredictive}
	rs, err := Run(context.Background(), Options{Fleets: fleets, Policies: pols, Seeds: []uint64{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.N != 250 || r.Failed > 0 || r.P50 > r.P95 || r.P95 > r.P99 || math.IsNaN(r.HitRate) {
			t.Errorf("inconsistent run %+v", r)
		}
	}
	sums := Summarize(rs)
	var buf bytes.Buffer
	Format(&buf, sums)
	vs := Check(sums, fleets, sched.SLOPredictive)
	FormatVerdicts(&buf, vs, sched.SLOPredictive)
	t.Logf("\n%s", buf.String())
	if len(vs) != len(fleets) {
		t.Fatalf("%d verdicts for %d fleets", len(vs), len(fleets))
	}
	get := func(fleet, pol string) Summary {
		for _, s := range sums {
			if s.Fleet == fleet && s.Policy == pol {
				return s
			}
		}
		t.Fatalf("no summary for %s on %s", pol, fleet)
		return Summary{}
	}
	for _, v := range vs {
		t.Logf("%s: issue 17's P99 targets met: %v (×%.2f the best single-signal P99, ×%.2f round-robin's)", v.Fleet, v.OK, v.VsBest, v.VsRR)
		d, pa, rr := get(v.Fleet, sched.SLOPredictive), get(v.Fleet, sched.PrefixAffinity), get(v.Fleet, sched.RoundRobin)
		if d.HitRate < pa.HitRate-0.10 {
			t.Errorf("%s: default cache hit rate %.0f%%, prefix affinity's %.0f%%: prompts are not kept where they are cached", v.Fleet, 100*d.HitRate, 100*pa.HitRate)
		}
		if float64(d.Mean) > 0.6*float64(rr.Mean) {
			t.Errorf("%s: default mean TTFT %v is over 0.6× round-robin's %v", v.Fleet, d.Mean, rr.Mean)
		}
	}
}

// TestSameSequence: the workload is a function of the seed alone, so
// every policy gets the identical requests.
func TestSameSequence(t *testing.T) {
	w := baseWorkload()
	w.LongShare, w.LongChars = 0.2, 3000
	a, b := newSource(w, 7), newSource(w, 7)
	c := newSource(w, 8)
	differ := false
	for range 50 {
		ra, _ := a.Next(context.Background())
		rb, _ := b.Next(context.Background())
		rc, _ := c.Next(context.Background())
		if ra.Messages[0].Content != rb.Messages[0].Content || ra.Messages[1].Content != rb.Messages[1].Content {
			t.Fatal("same seed, different requests")
		}
		if n := len(ra.Messages[0].Content); n != w.PrefixChars {
			t.Fatalf("prefix of %d chars, want %d", n, w.PrefixChars)
		}
		differ = differ || ra.Messages[1].Content != rc.Messages[1].Content
	}
	if !differ {
		t.Error("another seed gave the same requests")
	}
}

// TestSuiteSequenceUnchanged pins the suite's request sequence: verdicts
// of different sessions compare only if every fleet's requests stay
// what they were, so a new workload knob must leave them alone when it
// is off. The digest was taken before the knobs (ZipfS, PrefixCharsMax)
// existed.
func TestSuiteSequenceUnchanged(t *testing.T) {
	w := baseWorkload()
	w.LongShare, w.LongChars = 0.1, 12000
	s := newSource(w, 3)
	h := sha256.New()
	for range 300 {
		r, _ := s.Next(context.Background())
		fmt.Fprintf(h, "%s|%s|%s|%d|%d\n", r.Group, r.Messages[0].Content, r.Messages[1].Content, r.PromptTokens, r.MaxTokens)
	}
	if got, want := fmt.Sprintf("%x", h.Sum(nil)), "8ca6bac2599e3a11b523f485284837395bead0ed5d78cc9ff70a825d47080688"; got != want {
		t.Errorf("the suite's requests changed: digest %s, want %s", got, want)
	}
}

// TestSkewedGroupsAndPrefixLengths: with ZipfS each group's share of the
// requests follows 1/(k+1)^s, and with PrefixCharsMax each group keeps
// one prefix whose length lies in the range, which the request's token
// estimate counts.
func TestSkewedGroupsAndPrefixLengths(t *testing.T) {
	w := baseWorkload()
	w.Groups, w.ZipfS, w.PrefixChars, w.PrefixCharsMax = 8, 1.2, 1024, 8192
	s := newSource(w, 5)
	const n = 40000
	counts := map[string]int{}
	lens := map[string]int{}
	for range n {
		r, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		counts[r.Group]++
		p := len(r.Messages[0].Content)
		if p < w.PrefixChars || p > w.PrefixCharsMax {
			t.Fatalf("group %s: prefix of %d chars, outside [%d, %d]", r.Group, p, w.PrefixChars, w.PrefixCharsMax)
		}
		if l, ok := lens[r.Group]; ok && l != p {
			t.Fatalf("group %s: prefix of %d chars, earlier %d: a group's prefix is one text", r.Group, p, l)
		}
		lens[r.Group] = p
		if want := (p + len(r.Messages[1].Content)) / 4; r.PromptTokens != want {
			t.Fatalf("PromptTokens %d, want %d", r.PromptTokens, want)
		}
	}
	var total float64
	for k := range w.Groups {
		total += 1 / math.Pow(float64(k+1), w.ZipfS)
	}
	for k := range w.Groups {
		want := 1 / math.Pow(float64(k+1), w.ZipfS) / total
		got := float64(counts[string(rune('A'+k))]) / n
		if math.Abs(got-want) > 0.01 {
			t.Errorf("group %d: share %.3f, want %.3f", k, got, want)
		}
	}
	distinct := map[int]bool{}
	for _, l := range lens {
		distinct[l] = true
	}
	if len(distinct) < w.Groups/2 {
		t.Errorf("prefix lengths %v: the groups' lengths are not drawn", lens)
	}
}

// TestAnswerLengthsAndGroupLabels: with OutputTokensMax each request's
// answer length is drawn from the range, the rest of the request being
// what it would be without it; and more than 26 groups keep distinct
// labels.
func TestAnswerLengthsAndGroupLabels(t *testing.T) {
	w := baseWorkload()
	w.Groups = 60
	varied := w
	varied.OutputTokens, varied.OutputTokensMax = 8, 96
	a, b := newSource(w, 9), newSource(varied, 9)
	lens := map[int]bool{}
	labels := map[string]bool{}
	for range 3000 {
		ra, _ := a.Next(context.Background())
		rb, err := b.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if rb.MaxTokens < 8 || rb.MaxTokens > 96 {
			t.Fatalf("max_tokens %d, outside [8, 96]", rb.MaxTokens)
		}
		lens[rb.MaxTokens] = true
		if ra.Group != rb.Group || ra.Messages[0].Content != rb.Messages[0].Content || ra.Messages[1].Content != rb.Messages[1].Content {
			t.Fatalf("the answer lengths' draw changed the request: group %s / %s", ra.Group, rb.Group)
		}
		labels[ra.Group] = true
	}
	if len(lens) < 60 {
		t.Errorf("%d distinct answer lengths in 3000 requests; want them drawn over [8, 96]", len(lens))
	}
	if len(labels) != w.Groups {
		t.Errorf("%d distinct group labels for %d groups", len(labels), w.Groups)
	}
}

// TestConversations: with Sessions, each request is the next turn of
// one conversation: its prompt holds the conversation's previous prompt
// and an answer before the new message, a conversation lasts TurnsMin to
// TurnsMax turns, at most Sessions are open at once, and one seed gives
// one sequence.
func TestConversations(t *testing.T) {
	w := baseWorkload()
	w.Groups, w.PrefixChars, w.Sessions, w.TurnsMin, w.TurnsMax = 4, 2048, 12, 2, 6
	w.OutputTokens, w.OutputTokensMax = 8, 32
	s, again := newSource(w, 11), newSource(w, 11)
	prev := map[string]*workload.Request{}
	turns := map[string]int{}
	for i := range 2000 {
		r, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		r2, _ := again.Next(context.Background())
		if len(r2.Messages) != len(r.Messages) || r2.Messages[len(r2.Messages)-1].Content != r.Messages[len(r.Messages)-1].Content {
			t.Fatalf("request %d: same seed, different turn", i)
		}
		if r.Session == "" || r.Turn != (len(r.Messages)-1+1)/2 {
			t.Fatalf("request %d: session %q turn %d with %d messages", i, r.Session, r.Turn, len(r.Messages))
		}
		if r.Messages[0].Role != "system" || r.Messages[len(r.Messages)-1].Role != "user" {
			t.Fatalf("request %d: roles %s … %s", i, r.Messages[0].Role, r.Messages[len(r.Messages)-1].Role)
		}
		if p, ok := prev[r.Session]; ok {
			if r.Turn != p.Turn+1 || len(r.Messages) != len(p.Messages)+2 {
				t.Fatalf("request %d: turn %d after turn %d of %s", i, r.Turn, p.Turn, r.Session)
			}
			for j, m := range p.Messages {
				if r.Messages[j] != m {
					t.Fatalf("request %d: message %d differs from the turn before", i, j)
				}
			}
			ans := r.Messages[len(p.Messages)]
			if ans.Role != "assistant" || len(ans.Content) != 4*p.MaxTokens {
				t.Fatalf("request %d: the answer carried is %s of %d chars, want assistant of %d", i, ans.Role, len(ans.Content), 4*p.MaxTokens)
			}
		} else if r.Turn != 1 {
			t.Fatalf("request %d: %s starts at turn %d", i, r.Session, r.Turn)
		}
		chars := 0
		for _, m := range r.Messages {
			chars += len(m.Content)
		}
		if r.PromptTokens != chars/4 {
			t.Fatalf("PromptTokens %d, want %d", r.PromptTokens, chars/4)
		}
		prev[r.Session] = r
		turns[r.Session] = r.Turn
	}
	if len(s.sessions) != w.Sessions {
		t.Fatalf("%d conversations open, want %d", len(s.sessions), w.Sessions)
	}
	stillOpen := map[string]bool{}
	for _, c := range s.sessions {
		stillOpen["s"+strconv.Itoa(c.id)] = true
	}
	for id, n := range turns {
		if n > w.TurnsMax || (n < w.TurnsMin && !stillOpen[id]) {
			t.Errorf("%s ran %d turns, want %d–%d", id, n, w.TurnsMin, w.TurnsMax)
		}
	}
	if len(turns) < 2000/w.TurnsMax || len(turns) > 2000/w.TurnsMin+w.Sessions {
		t.Errorf("%d conversations in 2000 turns of %d–%d", len(turns), w.TurnsMin, w.TurnsMax)
	}
}
