package kube

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Leadership is what leader election drives: the picker's readiness.
type Leadership interface{ SetLeader(bool) }

// Election is active-passive high availability through a Lease.
type Election struct {
	Client    kubernetes.Interface
	Namespace string
	Lease     string
	Identity  string
	// Lease timing (defaults 15 s, 10 s, 2 s, as controllers use).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Target                                    Leadership
	Log                                       *slog.Logger
}

// Run campaigns until ctx ends: the target is the leader while this
// replica holds the lease, a standby otherwise (re-campaigning after it
// lost the lease). The lease is released when ctx ends, so that a
// standby takes over at once rather than after the lease expires.
func (e *Election) Run(ctx context.Context) error {
	if e.Log == nil {
		e.Log = slog.New(slog.DiscardHandler)
	}
	if e.LeaseDuration <= 0 {
		e.LeaseDuration = 15 * time.Second
	}
	if e.RenewDeadline <= 0 {
		e.RenewDeadline = 10 * time.Second
	}
	if e.RetryPeriod <= 0 {
		e.RetryPeriod = 2 * time.Second
	}
	e.Target.SetLeader(false)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Lease},
		Client:     e.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   e.LeaseDuration,
			RenewDeadline:   e.RenewDeadline,
			RetryPeriod:     e.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            e.Lease,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					e.Log.Info("leader: serving requests", "identity", e.Identity)
					e.Target.SetLeader(true)
				},
				OnStoppedLeading: func() {
					e.Log.Info("standby: lost the lease", "identity", e.Identity)
					e.Target.SetLeader(false)
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		le.Run(ctx)
	}
	return nil
}
