package gateway

import (
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	t0 := time.Unix(0, 0)
	b := newBucket(60, t0) // 1 per second, burst 60
	for i := range 60 {
		if ok, _ := b.allow(t0, 1); !ok {
			t.Fatalf("request %d within the burst refused", i)
		}
	}
	ok, wait := b.allow(t0, 1)
	if ok || wait < 900*time.Millisecond || wait > 1100*time.Millisecond {
		t.Fatalf("61st: ok %v wait %v, want refused with ≈1 s", ok, wait)
	}
	if ok, _ := b.allow(t0.Add(time.Second), 1); !ok {
		t.Fatal("refill after 1 s refused")
	}
	// Charging output tokens after the fact can go into debt, which delays
	// the next request.
	b.charge(t0.Add(time.Second), 30)
	if ok, wait := b.allow(t0.Add(time.Second), 1); ok || wait < 30*time.Second {
		t.Fatalf("after a 30-token debt: ok %v wait %v", ok, wait)
	}
	// A request larger than the burst is allowed once the bucket is full.
	big := newBucket(10, t0)
	if ok, _ := big.allow(t0, 500); !ok {
		t.Fatal("an oversized request with a full bucket was refused forever")
	}
}

func TestRetryBudget(t *testing.T) {
	var r retryBudget
	n := 0
	for r.withdraw() {
		n++
		if n > 100 {
			t.Fatal("budget unbounded")
		}
	}
	if n != retryReserve {
		t.Fatalf("idle reserve: %d retries, want %d", n, retryReserve)
	}
	for range 50 {
		r.deposit(0.2) // 50 requests at a 20% budget buy 10 retries
	}
	n = 0
	for r.withdraw() {
		n++
	}
	if n != 10 {
		t.Fatalf("after 50 requests at 0.2: %d retries, want 10", n)
	}
}

func TestNginxBaselineStreams(t *testing.T) {
	backend := quickBackend(t)
	ng := startNginx(t, backend)
	if ng == "" {
		t.Skip("nginx absent")
	}
	cfg := Config{Policy: "round-robin", Backends: []BackendConfig{{Name: "b", URL: backend, Models: []string{"m"}}}}
	_, gw := startGateway(t, cfg, Options{})
	c := benchClient()
	for _, u := range []string{backend, ng, gw} {
		for range 20 {
			if _, err := ttftOnce(c, u); err != nil {
				t.Fatalf("%s: %v", u, err)
			}
		}
	}
}
