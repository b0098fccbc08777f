// Package fakegpu_test reads the fake node through NVIDIA's own Go bindings (go-nvml) and
// go-nvlib's device enumeration, and compares with the facts pytest renders from the topology.
package fakegpu_test

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

type expectedGpu struct {
	Index     int    `json:"index"`
	Minor     int    `json:"minor"`
	UUID      string `json:"uuid"`
	Name      string `json:"name"`
	MemoryMiB uint64 `json:"memory_mib"`
	BusID     string `json:"bus_id"`
	Clique    string `json:"clique"`
	Links     int    `json:"links"`
	MigCap    bool   `json:"mig_capable"`
	MigDevs   int    `json:"mig_devices"`
}

type expected struct {
	Driver string        `json:"driver"`
	Gpus   []expectedGpu `json:"gpus"`
}

func load(t *testing.T) expected {
	path := os.Getenv("FAKEGPU_EXPECT")
	if path == "" {
		t.Skip("FAKEGPU_EXPECT not set: run through tests/nvml/test_go.py")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var exp expected
	if err := json.Unmarshal(data, &exp); err != nil {
		t.Fatal(err)
	}
	return exp
}

func check(t *testing.T, what string, ret nvml.Return) {
	t.Helper()
	if ret != nvml.SUCCESS {
		t.Fatalf("%s: %v", what, nvml.ErrorString(ret))
	}
}

func cstr(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func TestGoNvmlReadsTheNode(t *testing.T) {
	exp := load(t)
	check(t, "Init", nvml.Init())
	defer nvml.Shutdown()

	driver, ret := nvml.SystemGetDriverVersion()
	check(t, "driver", ret)
	if driver != exp.Driver {
		t.Errorf("driver %q, want %q", driver, exp.Driver)
	}
	count, ret := nvml.DeviceGetCount()
	check(t, "count", ret)
	if count != len(exp.Gpus) {
		t.Fatalf("count %d, want %d", count, len(exp.Gpus))
	}
	for _, g := range exp.Gpus {
		dev, ret := nvml.DeviceGetHandleByIndex(g.Index)
		check(t, "handle", ret)
		uuid, ret := dev.GetUUID()
		check(t, "uuid", ret)
		name, ret := dev.GetName()
		check(t, "name", ret)
		minor, ret := dev.GetMinorNumber()
		check(t, "minor", ret)
		mem, ret := dev.GetMemoryInfo()
		check(t, "memory", ret)
		pci, ret := dev.GetPciInfo()
		check(t, "pci", ret)
		got := fmt.Sprintf("%s|%s|%d|%d|%s", uuid, name, minor, mem.Total>>20, cstr(pci.BusId[:]))
		want := fmt.Sprintf("%s|%s|%d|%d|%s", g.UUID, g.Name, g.Minor, g.MemoryMiB, g.BusID)
		if got != want {
			t.Errorf("GPU %d: got %s, want %s", g.Index, got, want)
		}
		byUUID, ret := nvml.DeviceGetHandleByUUID(g.UUID)
		check(t, "by uuid", ret)
		if idx, _ := byUUID.GetIndex(); idx != g.Index {
			t.Errorf("by uuid: index %d, want %d", idx, g.Index)
		}
		links := 0
		for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
			if state, ret := dev.GetNvLinkState(l); ret == nvml.SUCCESS && state == nvml.FEATURE_ENABLED {
				links++
			}
		}
		if links != g.Links {
			t.Errorf("GPU %d: %d NVLinks up, want %d", g.Index, links, g.Links)
		}
		fab, ret := dev.GetGpuFabricInfo()
		clique := ""
		// NVIDIA's driver: a completed fabric with an all-zero cluster UUID (an NVSwitch
		// system without multi-node NVLink) has no clique
		if ret == nvml.SUCCESS && fab.State == nvml.GPU_FABRIC_STATE_COMPLETED && fab.ClusterUuid != [16]uint8{} {
			u := fab.ClusterUuid
			clique = fmt.Sprintf("%x-%x-%x-%x-%x.%d", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16], fab.CliqueId)
		} else if ret != nvml.ERROR_NOT_SUPPORTED && ret != nvml.SUCCESS {
			t.Errorf("GPU %d: fabric: %v", g.Index, nvml.ErrorString(ret))
		}
		if clique != g.Clique {
			t.Errorf("GPU %d: clique %q, want %q", g.Index, clique, g.Clique)
		}
		_, _, ret = dev.GetMigMode()
		if (ret == nvml.SUCCESS) != g.MigCap {
			t.Errorf("GPU %d: MIG mode answered %v, MIG capable %v", g.Index, nvml.ErrorString(ret), g.MigCap)
		}
	}
}

func TestGoNvlibEnumerates(t *testing.T) {
	exp := load(t)
	lib := nvml.New()
	check(t, "Init", lib.Init())
	defer lib.Shutdown()
	devices, err := device.New(lib).GetDevices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devices) != len(exp.Gpus) {
		t.Fatalf("go-nvlib sees %d devices, want %d", len(devices), len(exp.Gpus))
	}
	for i, d := range devices {
		uuid, ret := d.GetUUID()
		check(t, "uuid", ret)
		if uuid != exp.Gpus[i].UUID {
			t.Errorf("device %d: uuid %s, want %s", i, uuid, exp.Gpus[i].UUID)
		}
		migCapable, err := d.IsMigCapable()
		if err != nil {
			t.Fatal(err)
		}
		if migCapable != exp.Gpus[i].MigCap {
			t.Errorf("device %d: MIG capable %v, want %v", i, migCapable, exp.Gpus[i].MigCap)
		}
		// what nvidia-ctk cdi generate does for every GPU, MIG on or off
		migs, err := d.GetMigDevices()
		if err != nil {
			t.Errorf("device %d: GetMigDevices: %v", i, err)
		} else if len(migs) != exp.Gpus[i].MigDevs {
			t.Errorf("device %d: %d MIG devices, want %d", i, len(migs), exp.Gpus[i].MigDevs)
		}
	}
}
