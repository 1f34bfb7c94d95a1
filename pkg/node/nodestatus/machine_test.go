package nodestatus

import (
	"os"
	"path/filepath"
	"reflect"
	goruntime "runtime"
	"slices"
	"testing"
)

func TestMachineInfoFromFixture(t *testing.T) {
	info, err := hostFiles{root: "testdata/host"}.machineInfo()
	if err != nil {
		t.Fatal(err)
	}
	want := MachineInfo{
		NumCores: 7, MemoryCapacity: 16318580 * 1024, SwapCapacity: 2097148 * 1024,
		MachineID: "0f2b7f8e3a2c4b4f9d1e6a7b8c9d0e1f", SystemUUID: "4C4C4544-0042-3510-8058-B4C04F564833",
		BootID: "3c1e9a3e-6d52-4c1e-9a3d-2f7b1c0d9e8a", OSImage: "Debian GNU/Linux 12 (bookworm)",
	}
	got := *info
	got.HugePages = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("machine info =\n%+v\nwant\n%+v", got, want)
	}
	wantPages := []HugePages{{PageSizeKiB: 1048576, NumPages: 2}, {PageSizeKiB: 2048, NumPages: 128}}
	if !slices.Equal(info.HugePages, wantPages) {
		t.Errorf("huge pages = %v, want %v", info.HugePages, wantPages)
	}
}

// writeTree makes a host fixture from path → content.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestMachineInfoSparseHost(t *testing.T) {
	// No sysfs, no DMI, no huge pages, machine-id only in dbus's place, os-release only
	// in /usr/lib, and a rootless user namespace.
	root := writeTree(t, map[string]string{
		"proc/meminfo":              "MemTotal: 1024 kB\n",
		"var/lib/dbus/machine-id":   "dbus-id\n",
		"usr/lib/os-release":        "NAME=Clear\nPRETTY_NAME='Clear Linux OS'\n",
		"proc/self/uid_map":         "0 1000 1\n",
		"proc/device-tree/vm,uuid":  "ppc-uuid\x00",
		"sys/kernel/mm/transparent": "",
	})
	info, err := hostFiles{root: root}.machineInfo()
	if err != nil {
		t.Fatal(err)
	}
	if info.NumCores != goruntime.NumCPU() || info.MemoryCapacity != 1024*1024 || info.SwapCapacity != 0 {
		t.Errorf("cores %d memory %d swap %d", info.NumCores, info.MemoryCapacity, info.SwapCapacity)
	}
	if info.MachineID != "dbus-id" || info.SystemUUID != "ppc-uuid" || info.BootID != "" {
		t.Errorf("ids: machine %q system %q boot %q", info.MachineID, info.SystemUUID, info.BootID)
	}
	if info.OSImage != "Clear Linux OS" || !info.RunningInUserNamespace || len(info.HugePages) != 0 {
		t.Errorf("os %q userns %v huge pages %v", info.OSImage, info.RunningInUserNamespace, info.HugePages)
	}
}

func TestMachineInfoErrors(t *testing.T) {
	cases := map[string]map[string]string{
		"no meminfo":        {"etc/os-release": "PRETTY_NAME=x\n"},
		"no MemTotal":       {"proc/meminfo": "MemFree: 10 kB\n"},
		"odd hugepages dir": {"proc/meminfo": "MemTotal: 1 kB\n", "sys/kernel/mm/hugepages/hugepages-big/nr_hugepages": "1\n"},
		"bad page count":    {"proc/meminfo": "MemTotal: 1 kB\n", "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages": "many\n"},
	}
	for name, files := range cases {
		if _, err := (hostFiles{root: writeTree(t, files)}).machineInfo(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestCountCPUList(t *testing.T) {
	cases := map[string]int{"0": 1, "0-1": 2, "0-3,6,8-9": 7, "2,4": 2}
	for list, want := range cases {
		if got, err := countCPUList(list); err != nil || got != want {
			t.Errorf("%q: got %d, %v; want %d", list, got, err, want)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "0-x"} {
		if _, err := countCPUList(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestPrettyNameAndUIDMap(t *testing.T) {
	names := map[string]string{
		"PRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\n": "Ubuntu 24.04.1 LTS",
		"NAME=x\n  PRETTY_NAME=Alpine\n":       "Alpine",
		"NAME=Minimal\n":                       "Linux",
	}
	for in, want := range names {
		if got := prettyName([]byte(in)); got != want {
			t.Errorf("prettyName(%q) = %q, want %q", in, got, want)
		}
	}
	maps := map[string]bool{
		"         0          0 4294967295\n": true,
		"0 100000 65536\n":                   false,
		"0 0 4294967295\n1 1 1\n":            false,
	}
	for in, want := range maps {
		if got := isFullUIDMap([]byte(in)); got != want {
			t.Errorf("isFullUIDMap(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestReadMachineInfoOnThisHost(t *testing.T) {
	info, err := ReadMachineInfo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumCores < 1 || info.MemoryCapacity == 0 || info.KernelVersion == "" || info.KernelVersion == "Unknown" {
		t.Errorf("implausible machine info: %+v", info)
	}
	if info.EphemeralStorage == nil || *info.EphemeralStorage == 0 {
		t.Errorf("no ephemeral storage capacity for the temp dir's filesystem")
	}
}

// Without DMI tables or a device tree, the system UUID is the machine ID, as cAdvisor's
// last fallback reports it on such VMs.
func TestSystemUUIDFallsBackToMachineID(t *testing.T) {
	root := writeTree(t, map[string]string{
		"proc/meminfo":      "MemTotal: 1024 kB\n",
		"etc/machine-id":    "3d1219c7c4c5404aaa1f6d2a48adfda4\n",
		"etc/os-release":    "PRETTY_NAME=Debian\n",
		"proc/self/uid_map": "0 0 4294967295\n",
	})
	info, err := hostFiles{root: root}.machineInfo()
	if err != nil {
		t.Fatal(err)
	}
	if info.SystemUUID != "3d1219c7c4c5404aaa1f6d2a48adfda4" {
		t.Errorf("system UUID %q, want the machine ID", info.SystemUUID)
	}
}
