package state

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Files written by upstream's kubelet v1.37.2 (its state/checkpointer_test.go fixtures).
const (
	upstreamSingle  = `{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"ClaimInfoStateList\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"ShareID\":null,\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":2570581864}`
	upstreamShareID = `{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"ClaimInfoStateList\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"ShareID\":\"aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":736302156}`
	upstreamTwo     = `{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"ClaimInfoStateList\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example-1\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"ShareID\":null,\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}},{\"ClaimUID\":\"4cf8db2d-06c0-7d70-1a51-e59b25b2c16c\",\"ClaimName\":\"example-2\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-2\",\"ShareID\":null,\"RequestNames\":null,\"CDIDeviceIDs\":null}]}}}]}","Checksum":2820117767}`
	// An older kubelet's file: apiVersion v0 and no RequestNames.
	upstreamOlder  = `{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v0\",\"ClaimInfoStateList\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":1284376732}`
	upstreamBadSum = `{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"Entries\":[]}","Checksum":2930258365}`
)

const (
	driver  = "test-driver.cdi.k8s.io"
	podUID  = "139cdb46-f989-4f17-9561-ca10cfb509a6"
	claimID = types.UID("067798be-454e-4be4-9047-1aa06aea63f7")
)

func claim(name string, uid types.UID, devices ...Device) ClaimInfoState {
	return ClaimInfoState{
		ClaimUID: uid, ClaimName: name, Namespace: "default", PodUIDs: sets.New(podUID),
		DriverState: map[string]DriverState{driver: {Devices: devices}},
	}
}

func dev1() Device {
	return Device{PoolName: "worker-1", DeviceName: "dev-1", RequestNames: []string{"test request"}, CDIDeviceIDs: []string{"example.com/example=cdi-example"}}
}

func TestMarshalMatchesUpstreamBytes(t *testing.T) {
	share := types.UID("aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa")
	withShare := dev1()
	withShare.ShareID = &share
	for name, tc := range map[string]struct {
		list ClaimInfoStateList
		want string
	}{
		"single":   {ClaimInfoStateList{claim("example", claimID, dev1())}, upstreamSingle},
		"share-id": {ClaimInfoStateList{claim("example", claimID, withShare)}, upstreamShareID},
		"two": {ClaimInfoStateList{
			claim("example-1", claimID, dev1()),
			claim("example-2", "4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", Device{PoolName: "worker-1", DeviceName: "dev-2"}),
		}, upstreamTwo},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := MarshalCheckpoint(tc.list)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("marshal:\n got %s\nwant %s", got, tc.want)
			}
			back, err := UnmarshalCheckpoint([]byte(tc.want))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, tc.list) {
				t.Errorf("unmarshal upstream's file:\n got %#v\nwant %#v", back, tc.list)
			}
		})
	}
}

func TestUnmarshalOlderFile(t *testing.T) {
	got, err := UnmarshalCheckpoint([]byte(upstreamOlder))
	if err != nil {
		t.Fatal(err)
	}
	want := dev1()
	want.RequestNames = nil
	if !reflect.DeepEqual(got, ClaimInfoStateList{claim("example", claimID, want)}) {
		t.Errorf("got %#v", got)
	}
}

func TestUnmarshalErrors(t *testing.T) {
	_, err := UnmarshalCheckpoint([]byte(upstreamBadSum))
	var corrupt *CorruptError
	if !errors.As(err, &corrupt) || err.Error() != "checkpoint is corrupted" {
		t.Errorf("bad checksum: err = %v", err)
	}
	if _, err := UnmarshalCheckpoint([]byte(`{`)); err == nil || !strings.Contains(err.Error(), "unexpected end of JSON input") {
		t.Errorf("invalid JSON: err = %v", err)
	}
}

func TestReadOrCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	list, err := ReadOrCreateCheckpoint(dir)
	if err != nil || list != nil {
		t.Fatalf("new: %v, %v", list, err)
	}
	blob, err := os.ReadFile(filepath.Join(dir, CheckpointFileName))
	if err != nil {
		t.Fatal(err)
	}
	// What upstream's GetOrCreate stores for a new node.
	const empty = `{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"ClaimInfoStateList\":null}","Checksum":`
	if !strings.HasPrefix(string(blob), empty) {
		t.Errorf("empty checkpoint = %s", blob)
	}

	if err := os.WriteFile(filepath.Join(dir, CheckpointFileName), []byte(upstreamTwo), 0o600); err != nil {
		t.Fatal(err)
	}
	if list, err = ReadOrCreateCheckpoint(dir); err != nil || len(list) != 2 {
		t.Fatalf("upstream's file: %v, %v", list, err)
	}

	if err := os.WriteFile(filepath.Join(dir, CheckpointFileName), []byte(upstreamBadSum), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = ReadOrCreateCheckpoint(dir)
	if err == nil || err.Error() != "failed to get checkpoint dra_manager_state: checkpoint is corrupted" {
		t.Errorf("corrupt: err = %v", err)
	}
}

func TestHealthFileFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), HealthFileName)
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	health := DevicesHealthMap{"drv": {Devices: map[string]DeviceHealth{"pool/dev": {
		PoolName: "pool", DeviceName: "dev", Health: DeviceHealthStatusUnhealthy,
		LastUpdated: at, HealthCheckTimeout: 45 * time.Second, Message: "ECC errors",
	}}}}
	if err := WriteHealth(path, health); err != nil {
		t.Fatal(err)
	}
	blob, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// encoding/json of upstream's state.DevicesHealthMap.
	const want = `{"drv":{"Devices":{"pool/dev":{"PoolName":"pool","DeviceName":"dev","Health":"Unhealthy","LastUpdated":"2026-01-02T03:04:05.000000006Z","HealthCheckTimeout":45000000000,"Message":"ECC errors"}}}}`
	if string(blob) != want {
		t.Errorf("health file:\n got %s\nwant %s", blob, want)
	}
	back, err := ReadHealth(path)
	if err != nil || !reflect.DeepEqual(back, health) {
		t.Errorf("read back %#v, %v", back, err)
	}
	if missing, err := ReadHealth(path + ".none"); err != nil || len(missing) != 0 {
		t.Errorf("missing file: %v, %v", missing, err)
	}
}

func TestCloneIsDeep(t *testing.T) {
	share := types.UID("s")
	d := dev1()
	d.ShareID = &share
	orig := claim("example", claimID, d)
	c := orig.Clone()
	c.PodUIDs.Insert("other")
	c.DriverState[driver].Devices[0].CDIDeviceIDs[0] = "changed"
	*c.DriverState[driver].Devices[0].ShareID = "changed"
	if orig.PodUIDs.Has("other") || orig.DriverState[driver].Devices[0].CDIDeviceIDs[0] != "example.com/example=cdi-example" || *orig.DriverState[driver].Devices[0].ShareID != "s" {
		t.Errorf("clone shares memory with the original: %#v", orig)
	}
}
