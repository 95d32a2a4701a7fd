// Package testutil holds what tests across packages share: the policy for
// integration tests that need a real third-party component (skip locally,
// fail under CI) and loopback helpers.
package testutil
