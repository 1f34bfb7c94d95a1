//go:build !linux

package eviction

import "context"

// kernelNotifiers has no kernel to ask outside Linux: its notifiers never
// fire and the periodic check does all.
type kernelNotifiers struct{}

func (kernelNotifiers) NewCgroupNotifier(string, string, int64) (CgroupNotifier, error) {
	return disabledNotifier{}, nil
}

type disabledNotifier struct{}

func (disabledNotifier) Start(context.Context, chan<- struct{}) {}
func (disabledNotifier) Stop()                                  {}
