package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/workload"
)

// RunFleet simulates src on replicas identical replicas of d behind a
// round-robin load balancer, each on its own engine and virtual clock, and
// hands every record to sink in completion order (Backend names the
// replica: "NAME#k").
//
// Round-robin assignment depends on nothing the replicas do, so running
// each replica alone on its share of the requests is exactly the joint
// simulation. In an open loop (Rate, NextGap or a source's own times) every
// request keeps its intended time and MaxInFlight is split across the
// replicas; a closed loop's Concurrency is split across them, as that many
// clients would be by the balancer. Multi-turn sources, whose next turn
// waits for a replica's reply, are refused: run them on one replica.
func RunFleet(ctx context.Context, d *Deployment, replicas int, src workload.Source, opt RunOptions, sink func(*record.Record) error) (RunStats, error) {
	if replicas < 1 {
		return RunStats{}, fmt.Errorf("replicas must be at least 1, got %d", replicas)
	}
	if replicas == 1 {
		return Run(ctx, d, src, opt, sink)
	}
	if _, ok := src.(workload.FeedbackSource); ok {
		return RunStats{}, errors.New("a multi-turn workload waits for each reply: simulate it on one replica")
	}
	open := opt.Concurrency <= 0
	if opt.Rate > 0 && opt.NextGap == nil {
		// The same Poisson draw Run would make, so one replica's load is
		// the fleet's in distribution.
		rate := opt.Rate
		arr, err := workload.NewArrivals("poisson", rate, 1, int64(opt.Seed))
		if err != nil {
			return RunStats{}, err
		}
		opt.NextGap = arr.Next
	}
	limit := opt.Requests + opt.Warmup
	if opt.Requests == 0 {
		limit = 0
	}
	if limit == 0 && opt.Duration == 0 {
		return RunStats{}, errors.New("a fleet run needs --requests or --duration to know its requests in advance")
	}
	type assigned struct {
		req    *workload.Request
		global int
	}
	shares := make([][]assigned, replicas)
	var at time.Duration
	for i := 0; limit == 0 || i < limit; i++ {
		r, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return RunStats{}, fmt.Errorf("reading the workload: %w", err)
		}
		r.Warmup = r.Warmup || i < opt.Warmup
		if open {
			switch {
			case r.HasAt:
				at = r.At
			case i > 0 && opt.NextGap != nil:
				at += opt.NextGap()
			}
			if opt.Duration > 0 && at > opt.Duration {
				break
			}
			r.At, r.HasAt = at, true
		} else if opt.Duration > 0 && limit == 0 {
			return RunStats{}, errors.New("a closed-loop fleet run needs --requests")
		}
		shares[i%replicas] = append(shares[i%replicas], assigned{r, i})
	}
	var recs []record.Record
	var total RunStats
	for k, share := range shares {
		if len(share) == 0 {
			continue
		}
		reqs := make([]*workload.Request, len(share))
		for i, a := range share {
			reqs[i] = a.req
		}
		sub := opt
		sub.Requests, sub.Warmup, sub.Duration = 0, 0, 0
		sub.Target = opt.Target
		if open {
			sub.Rate, sub.NextGap, sub.Concurrency = 0, nil, 0
			if opt.MaxInFlight > 0 {
				sub.MaxInFlight = max(1, (opt.MaxInFlight+replicas-1-k)/replicas)
			}
		} else {
			sub.Concurrency = max(1, (opt.Concurrency+replicas-1-k)/replicas)
		}
		name := fmt.Sprintf("%s#%d", d.Name(), k)
		st, err := Run(ctx, d, &sliceSource{reqs: reqs, scheduled: open}, sub, func(r *record.Record) error {
			r.Index, r.Backend = share[r.Index].global, name
			recs = append(recs, *r)
			return nil
		})
		if err != nil {
			return RunStats{}, fmt.Errorf("replica %d: %w", k, err)
		}
		total.Virtual = max(total.Virtual, st.Virtual)
		total.Steps += st.Steps
		total.NumBlocks += st.NumBlocks
		e := &total.Engine
		e.Steps += st.Engine.Steps
		e.PromptTokens += st.Engine.PromptTokens
		e.GenTokens += st.Engine.GenTokens
		e.Preemptions += st.Engine.Preemptions
		e.PrefixQueries += st.Engine.PrefixQueries
		e.PrefixHits += st.Engine.PrefixHits
		e.BusyTime += st.Engine.BusyTime
		e.Finished += st.Engine.Finished
		e.ComputedTokens += st.Engine.ComputedTokens
	}
	slices.SortStableFunc(recs, func(a, b record.Record) int { return a.End.Compare(b.End) })
	if sink != nil {
		for i := range recs {
			if err := sink(&recs[i]); err != nil {
				return total, err
			}
		}
	}
	return total, nil
}

// sliceSource yields a fixed list of requests; scheduled ones carry At.
type sliceSource struct {
	reqs      []*workload.Request
	next      int
	scheduled bool
}

func (s *sliceSource) Next(ctx context.Context) (*workload.Request, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.next >= len(s.reqs) {
		return nil, io.EOF
	}
	s.next++
	return s.reqs[s.next-1], nil
}

func (s *sliceSource) OwnsSchedule() bool { return s.scheduled }
