package container

import (
	"errors"
	"fmt"
)

// Reasons a sync step failed; they become container waiting reasons and event reasons.
var (
	ErrRunContainer     = errors.New("RunContainerError")
	ErrKillContainer    = errors.New("KillContainerError")
	ErrCrashLoopBackOff = errors.New("CrashLoopBackOff")
	ErrCreatePodSandbox = errors.New("CreatePodSandboxError")
	ErrConfigPodSandbox = errors.New("ConfigPodSandboxError")
	ErrKillPodSandbox   = errors.New("KillPodSandboxError")
	ErrPreStartHook     = errors.New("PreStartHookError")
	ErrPostStartHook    = errors.New("PostStartHookError")
	ErrResizePodInPlace = errors.New("ResizePodInPlaceError")
	ErrCreateContainer  = errors.New("CreateContainerError")
	// ErrCreateContainerConfig is the reason when the container config cannot be generated.
	ErrCreateContainerConfig = errors.New("CreateContainerConfigError")
)

// SyncAction names one step of SyncPod or KillPod.
type SyncAction string

const (
	StartContainer   SyncAction = "StartContainer"
	KillContainer    SyncAction = "KillContainer"
	SetupNetwork     SyncAction = "SetupNetwork"
	TeardownNetwork  SyncAction = "TeardownNetwork"
	InitContainer    SyncAction = "InitContainer"
	CreatePodSandbox SyncAction = "CreatePodSandbox"
	ConfigPodSandbox SyncAction = "ConfigPodSandbox"
	KillPodSandbox   SyncAction = "KillPodSandbox"
	ResizePodInPlace SyncAction = "ResizePodInPlace"
)

// SyncResult is the outcome of one action on one target (a container name or pod name).
type SyncResult struct {
	Action  SyncAction
	Target  any
	Error   error
	Message string
}

// NewSyncResult starts a successful result.
func NewSyncResult(action SyncAction, target any) *SyncResult {
	return &SyncResult{Action: action, Target: target}
}

// Fail records the failure reason and message.
func (r *SyncResult) Fail(err error, msg string) {
	r.Error, r.Message = err, msg
}

// PodSyncResult collects the results of one SyncPod or KillPod.
type PodSyncResult struct {
	SyncResults []*SyncResult
	// SyncError is an error outside any single action (e.g. listing failed).
	SyncError error
}

// AddSyncResult appends results.
func (p *PodSyncResult) AddSyncResult(results ...*SyncResult) {
	p.SyncResults = append(p.SyncResults, results...)
}

// AddPodSyncResult merges another pod result into this one.
func (p *PodSyncResult) AddPodSyncResult(other PodSyncResult) {
	p.AddSyncResult(other.SyncResults...)
	p.Fail(other.SyncError)
}

// Fail records an error outside any action; nil is ignored.
func (p *PodSyncResult) Fail(err error) {
	if err != nil && p.SyncError == nil {
		p.SyncError = err
	}
}

// Error joins every failure, or returns nil when all succeeded.
func (p *PodSyncResult) Error() error {
	var errs []error
	if p.SyncError != nil {
		errs = append(errs, fmt.Errorf("failed to SyncPod: %w", p.SyncError))
	}
	for _, r := range p.SyncResults {
		if r.Error != nil {
			errs = append(errs, fmt.Errorf("failed to %q for %q with %w: %q", r.Action, r.Target, r.Error, r.Message))
		}
	}
	return errors.Join(errs...)
}
