package sharedstate

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Requests in flight are shared because each replica's own count is only
// its share of every backend's load: behind a round-robin balancer, four
// replicas that each place new prompt groups on the backend least loaded
// by their own count send them to the same backend about as often as at
// random, and those cold prefills queue behind each other (the replicas'
// P99 TTFT in TestReplicasMatchOneGateway). A count relayed through Redis
// is a few milliseconds old, much less than a prefill lasts, and much
// fresher than the engines' scraped metrics (every health-check interval).
//
// Counts are read every LoadInterval off the request path and only the
// changed ones are published, in one pub/sub message (no keys: a count
// is worth nothing once stale). Receivers keep each origin's last counts
// and hand the scheduler their sum per backend.

// loadLoop publishes this replica's requests in flight per backend.
func (c *Client) loadLoop(ctx context.Context) {
	tick := time.NewTicker(c.cfg.LoadInterval)
	defer tick.Stop()
	last := map[string]int64{}
	var cur []BackendLoad
	var beat, failedAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		c.expireLoads(now)
		// Without a subscription Redis is most likely gone: do not dial
		// it every tick. A failed publish waits a second before the next.
		if !c.connected.Load() || now.Sub(failedAt) < time.Second {
			clear(last)
			continue
		}
		cur = c.local.InFlight(cur[:0])
		announce := c.announce.Swap(false)
		full := announce || now.Sub(beat) >= loadHeartbeat
		var es []entry
		for _, l := range cur {
			if n, ok := last[l.Backend]; full || !ok || n != l.InFlight {
				es = append(es, entry{Kind: kindLoad, Backend: l.Backend, N: l.InFlight, Origin: c.cfg.ReplicaID})
			}
		}
		if len(es) == 0 && !full {
			continue
		}
		if err := c.publishLoads(ctx, es); err != nil {
			failedAt = now
			clear(last)
			if ctx.Err() == nil {
				c.cfg.Logger.Debug("shared state: publishing requests in flight", "error", err.Error())
			}
			continue
		}
		for _, e := range es {
			last[e.Backend] = e.N
		}
		if full {
			beat = now
		}
	}
}

// publishLoads sends one message of load entries.
func (c *Client) publishLoads(ctx context.Context, es []entry) error {
	msg, err := json.Marshal(message{Origin: c.cfg.ReplicaID, Entries: es})
	if err != nil {
		return fmt.Errorf("encoding requests in flight: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := c.rdb.Publish(ctx, c.channel(), msg).Err(); err != nil {
		return fmt.Errorf("publishing requests in flight: %w", err)
	}
	return nil
}

// heard notes a message from another replica (every replica publishes
// one at least every loadHeartbeat, its counts): a replica not heard of
// before is ranked, and told of this one at the next tick.
func (c *Client) heard(origin string) {
	if c.cfg.LoadInterval < 0 {
		return
	}
	c.lmu.Lock()
	defer c.lmu.Unlock()
	c.heardLocked(origin, time.Now())
}

func (c *Client) heardLocked(origin string, now time.Time) *remoteLoad {
	r := c.remote[origin]
	if r == nil {
		r = &remoteLoad{inFlight: map[string]int64{}}
		c.remote[origin] = r
		c.rankLocked()
		c.announce.Store(true)
	}
	r.seen = now
	return r
}

// applyLoad records another replica's count and hands the scheduler the
// new sum for that backend.
func (c *Client) applyLoad(e *entry) {
	if c.cfg.LoadInterval < 0 {
		return
	}
	c.lmu.Lock()
	defer c.lmu.Unlock()
	r := c.heardLocked(e.Origin, time.Now())
	if r.inFlight[e.Backend] == e.N {
		return
	}
	r.inFlight[e.Backend] = e.N
	c.local.ImportInFlight(e.Backend, c.remoteSum(e.Backend))
}

// remoteSum is the other replicas' requests in flight on backend; lmu held.
func (c *Client) remoteSum(backend string) int64 {
	var n int64
	for _, r := range c.remote {
		n += r.inFlight[backend]
	}
	return n
}

// expireLoads forgets the replicas not heard from for loadExpiry.
func (c *Client) expireLoads(now time.Time) {
	c.forgetLoads(func(origin string) bool {
		return now.Sub(c.remote[origin].seen) > loadExpiry
	})
}

// forgetLoads drops the counts of the origins drop selects and updates
// the sums of the backends they had requests on.
func (c *Client) forgetLoads(drop func(origin string) bool) {
	c.lmu.Lock()
	defer c.lmu.Unlock()
	var touched map[string]bool
	dropped := false
	for o, r := range c.remote {
		if !drop(o) {
			continue
		}
		for b, n := range r.inFlight {
			if n != 0 {
				if touched == nil {
					touched = map[string]bool{}
				}
				touched[b] = true
			}
		}
		delete(c.remote, o)
		dropped = true
	}
	if dropped {
		c.rankLocked()
	}
	for b := range touched {
		c.local.ImportInFlight(b, c.remoteSum(b))
	}
}

// ReplicaSlot implements sched.SharedObserver: this replica's rank among
// the replicas it hears from (by id), and their number, itself included.
// Every replica computes the same order, so schedulers can stagger their
// rotations without talking to each other (sched's slo-affinity picker).
func (c *Client) ReplicaSlot() (rank, n int) {
	v := c.slot.Load()
	if v == 0 {
		return 0, 1
	}
	return int(v >> 32), int(uint32(v))
}

// rankLocked recomputes slot; lmu held.
func (c *Client) rankLocked() {
	rank := 0
	for o := range c.remote {
		if o < c.cfg.ReplicaID {
			rank++
		}
	}
	c.slot.Store(uint64(rank)<<32 | uint64(len(c.remote)+1))
}
