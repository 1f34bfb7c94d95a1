package dra

import (
	"errors"
	"maps"
	"slices"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/nodelet/nodelet/pkg/node/dra/state"
)

// claimInfo is a claim in the cache: its checkpointed state plus two flags that are
// deliberately not checkpointed. After a restart every claim reads as not prepared, so
// that a new pod using it makes the driver prepare it again (drivers must be
// idempotent) instead of trusting a prepare that may have been cut short.
type claimInfo struct {
	state.ClaimInfoState
	prepared bool
	// unpreparing is set while NodeUnprepareResources runs for the claim's last pod;
	// no pod may start using the claim until its entry is gone.
	unpreparing bool
}

// newClaimInfo builds the cache entry for a claim fetched from the API server: one
// driver entry per driver with allocation results, without devices until the driver
// prepared them.
func newClaimInfo(claim *resourceapi.ResourceClaim, optionalNodeOperations bool) (*claimInfo, error) {
	if claim.Status.Allocation == nil {
		return nil, errors.New("not allocated")
	}
	drivers, err := driverStates(claim.Status.Allocation.Devices.Results, optionalNodeOperations)
	if err != nil {
		return nil, err
	}
	return &claimInfo{ClaimInfoState: state.ClaimInfoState{
		ClaimUID: claim.UID, ClaimName: claim.Name, Namespace: claim.Namespace,
		PodUIDs: sets.New[string](), DriverState: drivers,
	}}, nil
}

// driverStates finds, for each driver of the allocation results, which node operations
// may be skipped: only those that every one of the driver's results skips, since the
// driver is called once per claim.
func driverStates(results []resourceapi.DeviceRequestAllocationResult, optionalNodeOperations bool) (map[string]state.DriverState, error) {
	total := map[string]int{}
	skips := map[string]map[resourceapi.SkipNodeOperation]int{}
	for _, r := range results {
		total[r.Driver]++
		if len(r.SkipNodeOperations) == 0 {
			continue
		}
		if skips[r.Driver] == nil {
			skips[r.Driver] = map[resourceapi.SkipNodeOperation]int{}
		}
		if slices.Contains(r.SkipNodeOperations, resourceapi.SkipNodeOperationAll) {
			skips[r.Driver][resourceapi.SkipNodeOperationAll]++
			continue
		}
		for _, op := range r.SkipNodeOperations {
			skips[r.Driver][op]++
		}
	}
	out := make(map[string]state.DriverState, len(total))
	for driver, n := range total {
		skipped := commonSkips(skips[driver], n)
		if len(skipped) > 0 && !optionalNodeOperations {
			return nil, errors.New("DRAOptionalNodeOperations feature gate is disabled on kubelet")
		}
		out[driver] = state.DriverState{SkipNodeOperations: skipped}
	}
	return out, nil
}

// commonSkips returns the operations skipped by all n results, given how many results
// skip each operation ("*" counting for all of them).
func commonSkips(counts map[resourceapi.SkipNodeOperation]int, n int) []resourceapi.SkipNodeOperation {
	if counts == nil {
		return nil
	}
	all := counts[resourceapi.SkipNodeOperationAll]
	if all == n {
		return []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationAll}
	}
	var out []resourceapi.SkipNodeOperation
	for op, c := range counts {
		if op != resourceapi.SkipNodeOperationAll && c+all == n {
			out = append(out, op)
		}
	}
	slices.Sort(out)
	return out
}

// setDevices replaces what a driver prepared for the claim: the driver's answer is
// authoritative, and a retried prepare must not duplicate devices.
func (info *claimInfo) setDevices(driver string, devices []state.Device) {
	if info.DriverState == nil {
		info.DriverState = map[string]state.DriverState{}
	}
	ds := info.DriverState[driver]
	ds.Devices = devices
	info.DriverState[driver] = ds
}

// cdiDevices returns the CDI device IDs of the devices serving a request of the claim;
// an empty request, or a device without request names, matches.
func (info *claimInfo) cdiDevices(request string) []string {
	var ids []string
	for _, driver := range info.DriverNames() {
		for _, d := range info.DriverState[driver].Devices {
			if request == "" || len(d.RequestNames) == 0 || slices.Contains(d.RequestNames, request) {
				ids = append(ids, d.CDIDeviceIDs...)
			}
		}
	}
	return ids
}

// claimCache holds the claims prepared on the node, by namespace/name, and mirrors them
// into the checkpoint.
type claimCache struct {
	sync.RWMutex
	dir    string
	claims map[string]*claimInfo
}

func claimKey(namespace, name string) string { return namespace + "/" + name }

// loadClaimCache reads the checkpoint in dir, creating an empty one on a new node.
func loadClaimCache(dir string) (*claimCache, error) {
	list, err := state.ReadOrCreateCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	c := &claimCache{dir: dir, claims: make(map[string]*claimInfo, len(list))}
	for _, s := range list {
		if s.PodUIDs == nil {
			s.PodUIDs = sets.New[string]()
		}
		c.claims[claimKey(s.Namespace, s.ClaimName)] = &claimInfo{ClaimInfoState: s}
	}
	return c, nil
}

func (c *claimCache) get(name, namespace string) (*claimInfo, bool) {
	info, ok := c.claims[claimKey(namespace, name)]
	return info, ok
}

func (c *claimCache) add(info *claimInfo) {
	c.claims[claimKey(info.Namespace, info.ClaimName)] = info
}

func (c *claimCache) delete(name, namespace string) {
	delete(c.claims, claimKey(namespace, name))
}

// hasPod tells whether any claim is used by the pod. Caller holds a lock.
func (c *claimCache) hasPod(uid types.UID) bool {
	for _, info := range c.claims {
		if info.PodUIDs.Has(string(uid)) {
			return true
		}
	}
	return false
}

// claimNamesOfPod returns the names of the claims the pod uses. Caller holds a lock.
func (c *claimCache) claimNamesOfPod(uid types.UID) []string {
	var names []string
	for _, info := range c.claims {
		if info.PodUIDs.Has(string(uid)) {
			names = append(names, info.ClaimName)
		}
	}
	return names
}

// sync writes the whole cache to the checkpoint, in key order so that the same state
// gives the same bytes. Caller holds the write lock.
func (c *claimCache) sync() error {
	list := make(state.ClaimInfoStateList, 0, len(c.claims))
	for _, key := range slices.Sorted(maps.Keys(c.claims)) {
		list = append(list, c.claims[key].ClaimInfoState)
	}
	return state.WriteCheckpoint(c.dir, list)
}

// claimsInUse counts the prepared claims by driver, and all of them under anyDriver.
// Caller holds a lock.
func (c *claimCache) claimsInUse() map[string]int {
	counts := map[string]int{anyDriver: 0}
	for _, info := range c.claims {
		if !info.prepared {
			continue
		}
		counts[anyDriver]++
		for driver := range info.DriverState {
			counts[driver]++
		}
	}
	return counts
}
