package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// HashKey returns the hex SHA-256 of a client key, as stored in the config.
func HashKey(key string) string {
	s := sha256.Sum256([]byte(key))
	return hex.EncodeToString(s[:])
}

// clientKeyFrom reads the key a client presented: "Authorization: Bearer K"
// (OpenAI) or "x-api-key: K" (Anthropic).
func clientKeyFrom(h http.Header) string {
	if k := h.Get("X-Api-Key"); k != "" {
		return k
	}
	a := h.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

// bucket is a token bucket refilled continuously at rate per second up to
// burst. It may go negative: output tokens are charged after the fact, and
// the debt delays the key's next requests.
type bucket struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
	rate   float64
	burst  float64
	// owed are tokens charged by owe and not yet taken from tokens: a
	// stream charges its output as it goes with an atomic add per read,
	// not the mutex; allow and charge settle the debt.
	owed atomic.Int64
}

func newBucket(perMinute float64, now time.Time) *bucket {
	return &bucket{tokens: perMinute, last: now, rate: perMinute / 60, burst: perMinute}
}

func (b *bucket) refill(now time.Time) {
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = math.Min(b.burst, b.tokens+dt*b.rate)
		b.last = now
	}
	b.tokens -= float64(b.owed.Swap(0))
}

// allow takes n if at least min(n, burst) is available; otherwise it
// reports how long until it would be.
func (b *bucket) allow(now time.Time, n float64) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	need := math.Min(n, b.burst)
	if b.tokens >= need {
		b.tokens -= n
		return true, 0
	}
	return false, time.Duration((need - b.tokens) / b.rate * float64(time.Second))
}

// owe charges n tokens without taking the mutex (see owed).
func (b *bucket) owe(n int) { b.owed.Add(int64(n)) }

// charge takes n unconditionally.
func (b *bucket) charge(now time.Time, n float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	b.tokens -= n
}

// keyLimits holds one client key's buckets; they survive config reloads
// unless the key's limits change.
type keyLimits struct {
	rpm, tpm float64
	req, tok *bucket
}

type limiters struct {
	mu   sync.Mutex
	keys map[string]*keyLimits
}

func (l *limiters) get(k *ClientKey, now time.Time) *keyLimits {
	l.mu.Lock()
	defer l.mu.Unlock()
	kl := l.keys[k.SHA256]
	if kl == nil || kl.rpm != k.RequestsPerMinute || kl.tpm != k.TokensPerMinute {
		kl = &keyLimits{rpm: k.RequestsPerMinute, tpm: k.TokensPerMinute}
		if k.RequestsPerMinute > 0 {
			kl.req = newBucket(k.RequestsPerMinute, now)
		}
		if k.TokensPerMinute > 0 {
			kl.tok = newBucket(k.TokensPerMinute, now)
		}
		l.keys[k.SHA256] = kl
	}
	return kl
}

// retryBudget lets retries be at most a fraction of requests: every request
// deposits `ratio` of a retry, every retry withdraws one. A small reserve
// lets an idle gateway retry its first failures. The balance is kept in
// thousandths of a retry so that deposits add up exactly.
type retryBudget struct {
	mu      sync.Mutex
	balance int64
}

const retryReserve = 10

func (r *retryBudget) deposit(ratio float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.balance = min(r.balance+int64(math.Round(ratio*1000)), 100_000)
}

func (r *retryBudget) withdraw() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.balance+retryReserve*1000 >= 1000 {
		r.balance -= 1000
		return true
	}
	return false
}
