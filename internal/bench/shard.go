package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ttft-dev/ttft/internal/workload"
)

// Shard makes a runner one of Count load generators of one run. Every shard
// regenerates the same seeded global sequence of requests (and, in an open
// loop, the same intended send times from the same origin) and keeps item i
// when i mod Count = Index, as k6's execution segments stripe iterations;
// a closed loop's workers are striped the same way, and a source that must
// stay whole per session (workload.ShardedSource) splits itself. The union
// of the shards' records is then the single-machine run's, request for
// request, with the same global indices.
type Shard struct {
	Index, Count int
	// Start, when set, is called once the warm-up is done and returns the
	// absolute time (on this machine's clock) at which the measured phase
	// starts: a barrier the shards share, so that their schedules have one
	// origin. The runner sleeps until then.
	Start func(ctx context.Context) (time.Time, error)
}

// active reports whether the run is split at all.
func (s Shard) active() bool { return s.Count > 1 }

// owns reports whether global item i is this shard's.
func (s Shard) owns(i int) bool { return !s.active() || i%s.Count == s.Index }

// share is this shard's part of n items or workers (n <= 0: unlimited).
func (s Shard) share(n int) int {
	if n <= 0 || !s.active() {
		return n
	}
	return workload.ShardShare(n, s.Index, s.Count)
}

// Validate checks index and count.
func (s Shard) Validate() error {
	if s.Count == 0 && s.Index == 0 {
		return nil
	}
	if s.Count < 1 || s.Index < 0 || s.Index >= s.Count {
		return fmt.Errorf("shard %d of %d: want 0 <= index < count", s.Index, s.Count)
	}
	return nil
}

// errShardIdle says this shard has nothing of the run to do.
var errShardIdle = errors.New("bench: this shard has no workers")

// skip passes over another shard's item: without building it when the
// source can, else by building and dropping it.
func skip(ctx context.Context, src workload.Source) error {
	if s, ok := src.(workload.Skipper); ok {
		return s.Skip(ctx)
	}
	_, err := src.Next(ctx)
	return err
}
