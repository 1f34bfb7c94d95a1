package status

// Waiting reasons the kubelet itself writes into container statuses (upstream's kubelet
// package constants); the runtime's own reasons (Completed, Error, OOMKilled, ...) and sync
// failures (CrashLoopBackOff, ErrImagePull, ...) pass through as given.
const (
	// ContainerCreating is the default waiting reason of a container of a pod without
	// init containers.
	ContainerCreating = "ContainerCreating"
	// PodInitializing is the default waiting reason of every container of a pod with init
	// containers.
	PodInitializing = "PodInitializing"
	// ContainerStatusUnknown is the terminated reason of a container the runtime lost.
	ContainerStatusUnknown = "ContainerStatusUnknown"
)

// Condition reasons (upstream's pkg/kubelet/status/generate.go).
const (
	// UnknownContainerStatuses says that all container statuses are unknown.
	UnknownContainerStatuses = "UnknownContainerStatuses"
	// PodCompleted says that all related containers have succeeded.
	PodCompleted = "PodCompleted"
	// PodFailed says that the pod has failed and as such the containers have failed.
	PodFailed = "PodFailed"
	// ContainersNotReady says that one or more containers are not ready.
	ContainersNotReady = "ContainersNotReady"
	// ContainersNotInitialized says that one or more init containers have not succeeded.
	ContainersNotInitialized = "ContainersNotInitialized"
	// ReadinessGatesNotReady says that one or more pod readiness gates are not ready.
	ReadinessGatesNotReady = "ReadinessGatesNotReady"
)

// Messages of the statuses invented for containers the runtime no longer reports.
const (
	msgLostOnTermination = "The container could not be located when the pod was terminated"
	msgLostWhileRunning  = "The container could not be located when the pod was deleted.  The container used to be Running"
	msgInitLost          = "Unable to get init container status from container runtime and pod has been initialized, treat it as exited normally"
	// exitCodeLost is what a lost container reports: 128+SIGKILL, an error.
	exitCodeLost = 137
)
