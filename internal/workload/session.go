package workload

import (
	"container/heap"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"
)

// SessionOptions configures NewSessions: multi-turn conversations where each
// turn resends the whole history plus a new user message.
type SessionOptions struct {
	Tokenizer Tokenizer // nil: DefaultTokenizer()
	Seed      int64
	Scenario  string
	Sessions  int
	Turns     int
	// UserTokens is the length of each new user message; Output the reply cap.
	UserTokens  Dist
	Output      Dist
	ForceOutput bool
	// SystemTokens > 0 starts every session with a system prompt of that
	// length (distinct per session).
	SystemTokens int
	// ThinkTime separates a reply from the next turn: the next turn's At is
	// the reply's end plus ThinkTime, measured from Origin.
	ThinkTime time.Duration
	// Arrival, when its rate is > 0, schedules session starts (At of turn 1).
	Arrival ArrivalSpec
	// MaxActive bounds the sessions open at once (0 = all); a new session
	// starts when one ends. This is "sessions by concurrency".
	MaxActive int
	// Origin is the run's start on the clock that Result.End uses; zero
	// means the wall-clock time of the first Next call. A simulator on a
	// virtual clock sets it to its virtual start.
	Origin time.Time
}

// Sessions is a FeedbackSource of multi-turn conversations. Next hands out
// whichever turn is ready first; it blocks only while every unfinished
// session is waiting for a reply, and returns io.EOF once all sessions have
// ended, so it cannot deadlock however the runner's concurrency compares
// with the number of sessions. A failed turn ends its session.
type Sessions struct {
	opt   SessionOptions
	gen   *PromptGen
	sched *schedule

	mu       sync.Mutex
	changed  chan struct{}
	origin   time.Time
	started  int // sessions begun
	active   int
	ended    int
	inflight int
	ready    turnHeap
	seq      int
	nextIdx  int
	byReq    map[*Request]*session // in-flight turns
	// shardIdx of shardN: this source opens only sessions id mod shardN =
	// shardIdx (SetShard); shardN 0 or 1 is the whole run.
	shardIdx, shardN int
}

// sessionTurn is a turn ready to go. A scheduled session start has a
// relative offset; a follow-up turn has an absolute ready time (the reply's
// end plus think time) turned into an offset from the origin when handed out.
type sessionTurn struct {
	s       *session
	at      time.Duration // relative offset (session starts)
	readyAt time.Time     // absolute (follow-ups)
	hasAt   bool
	key     time.Duration // heap order: offset at push time
	seq     int
}

type turnHeap []*sessionTurn

func (h turnHeap) Len() int { return len(h) }
func (h turnHeap) Less(i, j int) bool {
	if h[i].key != h[j].key {
		return h[i].key < h[j].key
	}
	return h[i].seq < h[j].seq
}
func (h turnHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *turnHeap) Push(x any)   { *h = append(*h, x.(*sessionTurn)) }
func (h *turnHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// push queues a ready turn, ordered by when it may be sent, so that a runner
// sleeping until the head's At never holds back an earlier turn. Caller
// holds mu.
func (s *Sessions) push(t *sessionTurn) {
	t.key = t.at
	if !t.readyAt.IsZero() {
		t.key = t.readyAt.Sub(s.originLocked())
	}
	s.seq++
	t.seq = s.seq
	heap.Push(&s.ready, t)
}

func (s *Sessions) originLocked() time.Time {
	if s.origin.IsZero() {
		s.origin = time.Now()
	}
	return s.origin
}

// SetOrigin tells the source when the run (or its measured phase) started,
// on the clock that Result.End uses; At offsets are counted from it. Runners
// call it at the start of each phase; a simulator passes its virtual start.
// Without it, the origin is the wall-clock time of the first Next.
func (s *Sessions) SetOrigin(t time.Time) {
	s.mu.Lock()
	s.origin = t
	s.mu.Unlock()
}

type session struct {
	id      int
	turn    int // turns issued so far
	rng     *rand.Rand
	history []Message
	ids     [][]int // token IDs per history message
}

// NewSessions validates opt and returns the source.
func NewSessions(opt SessionOptions) (*Sessions, error) {
	if opt.Sessions < 1 || opt.Turns < 1 {
		return nil, fmt.Errorf("sessions: need at least 1 session and 1 turn, got %d and %d", opt.Sessions, opt.Turns)
	}
	if opt.ThinkTime < 0 || opt.SystemTokens < 0 || opt.MaxActive < 0 {
		return nil, fmt.Errorf("sessions: think time, system tokens and max active must not be negative")
	}
	if err := opt.UserTokens.Validate("user tokens"); err != nil {
		return nil, fmt.Errorf("sessions: %w", err)
	}
	if err := opt.Output.Validate("output tokens"); err != nil {
		return nil, fmt.Errorf("sessions: %w", err)
	}
	if opt.Tokenizer == nil {
		opt.Tokenizer = DefaultTokenizer()
	}
	gen, err := NewPromptGen(opt.Tokenizer)
	if err != nil {
		return nil, err
	}
	s := &Sessions{opt: opt, gen: gen, changed: make(chan struct{}), origin: opt.Origin, byReq: map[*Request]*session{}}
	if opt.Arrival.RatePerS > 0 {
		if s.sched, err = newSchedule(opt.Arrival, opt.Seed); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	s.startSessions()
	s.mu.Unlock()
	return s, nil
}

// OwnsSchedule reports whether sessions start on an arrival process (each
// later turn then follows its reply by the think time).
func (s *Sessions) OwnsSchedule() bool { return s.sched != nil }

// startSessions opens sessions up to MaxActive. Caller holds mu.
func (s *Sessions) startSessions() {
	for s.started < s.opt.Sessions && (s.opt.MaxActive == 0 || s.active < s.opt.MaxActive) {
		id := s.started
		s.started++
		if s.shardN > 1 && id%s.shardN != s.shardIdx {
			// Another shard's session: its start time is drawn all the
			// same, so this shard's sessions start when they would in
			// the single-machine run.
			if s.sched != nil {
				s.sched.next()
			}
			s.ended++
			continue
		}
		s.active++
		ss := &session{id: id, rng: rand.New(rand.NewPCG(uint64(s.opt.Seed), 0x73657373_00000000|uint64(id)))}
		t := &sessionTurn{s: ss}
		if s.sched != nil {
			t.at, t.hasAt = s.sched.next(), true
		}
		s.push(t)
	}
}

// SetShard keeps whole sessions: session id goes to shard id mod count, and
// a concurrency bound (MaxActive) is striped the same way. It must be called
// before the first Next.
func (s *Sessions) SetShard(index, count int) error {
	if count < 1 || index < 0 || index >= count {
		return fmt.Errorf("sessions: shard %d of %d is out of range", index, count)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nextIdx > 0 {
		return fmt.Errorf("sessions: SetShard after the first request")
	}
	s.shardIdx, s.shardN = index, count
	if s.opt.MaxActive > 0 {
		s.opt.MaxActive = max(1, ShardShare(s.opt.MaxActive, index, count))
	}
	// Start over: NewSessions already opened the first sessions.
	s.ready, s.started, s.active, s.ended, s.seq = nil, 0, 0, 0, 0
	if s.sched != nil {
		sched, err := newSchedule(s.opt.Arrival, s.opt.Seed)
		if err != nil {
			return err
		}
		s.sched = sched
	}
	s.startSessions()
	s.notify()
	return nil
}

func (s *Sessions) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Next returns the next ready turn, blocking while all open sessions wait
// for replies.
func (s *Sessions) Next(ctx context.Context) (*Request, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// Take the wake-up channel before looking, so a Done in between
		// cannot be missed.
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		r, ok, err := s.TryNext()
		if ok || err != nil {
			return r, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		}
	}
}

// TryNext is Next without waiting: ok is false while every open session
// waits for a reply.
func (s *Sessions) TryNext() (*Request, bool, error) {
	s.mu.Lock()
	origin := s.originLocked()
	if len(s.ready) > 0 {
		t := heap.Pop(&s.ready).(*sessionTurn)
		if !t.readyAt.IsZero() {
			t.at = max(t.readyAt.Sub(origin), 0)
		}
		idx := s.nextIdx
		s.nextIdx++
		s.inflight++
		s.mu.Unlock()
		r, err := s.build(t, idx)
		if err != nil {
			s.mu.Lock()
			s.inflight--
			s.endSession()
			s.mu.Unlock()
			return nil, false, err
		}
		s.mu.Lock()
		s.byReq[r] = t.s
		s.mu.Unlock()
		return r, true, nil
	}
	ended := s.ended >= s.opt.Sessions
	s.mu.Unlock()
	if ended {
		return nil, false, io.EOF
	}
	return nil, false, nil
}

// build makes the request for a session's next turn. Only the session's
// owner (the one in-flight turn) touches its state, so no lock is needed.
func (s *Sessions) build(t *sessionTurn, idx int) (*Request, error) {
	ss := t.s
	if ss.turn == 0 && s.opt.SystemTokens > 0 {
		text, ids, err := s.gen.Text(ss.rng, s.opt.SystemTokens)
		if err != nil {
			return nil, fmt.Errorf("session %d system prompt: %w", ss.id, err)
		}
		ss.history = append(ss.history, Message{Role: "system", Content: text})
		ss.ids = append(ss.ids, ids)
	}
	ss.turn++
	text, ids, err := s.gen.Text(ss.rng, s.opt.UserTokens.Draw(ss.rng))
	if err != nil {
		return nil, fmt.Errorf("session %d turn %d: %w", ss.id, ss.turn, err)
	}
	ss.history = append(ss.history, Message{Role: "user", Content: text})
	ss.ids = append(ss.ids, ids)
	out := s.opt.Output.Draw(ss.rng)
	r := &Request{
		Index:     idx,
		Messages:  append([]Message(nil), ss.history...),
		MaxTokens: out,
		At:        t.at,
		HasAt:     t.hasAt,
		Scenario:  s.opt.Scenario,
		Session:   fmt.Sprintf("s%d", ss.id),
		Turn:      ss.turn,
	}
	if s.opt.ForceOutput {
		r.MinTokens = out
	}
	for _, m := range ss.ids {
		r.Tokens = append(r.Tokens, m...)
	}
	r.PromptTokens = len(r.Tokens)
	return r, nil
}

// endSession records a session's end and opens the next. Caller holds mu.
func (s *Sessions) endSession() {
	s.ended++
	s.active--
	s.startSessions()
	s.notify()
}

// Done appends the reply to the session's history and makes its next turn
// ready after the think time; a failed request ends the session.
func (s *Sessions) Done(req *Request, res Result) {
	// Find the session by its pending request.
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.byReq[req]
	if !ok {
		return // not ours, or reported twice
	}
	delete(s.byReq, req)
	s.inflight--
	if !res.OK || ss.turn >= s.opt.Turns {
		s.endSession()
		return
	}
	ss.history = append(ss.history, Message{Role: "assistant", Content: res.Text})
	ss.ids = append(ss.ids, s.opt.Tokenizer.Encode(res.Text))
	t := &sessionTurn{s: ss}
	if s.opt.ThinkTime > 0 || req.HasAt {
		end := res.End
		if end.IsZero() {
			end = time.Now()
		}
		t.readyAt, t.hasAt = end.Add(s.opt.ThinkTime), true
	}
	s.push(t)
	s.notify()
}
