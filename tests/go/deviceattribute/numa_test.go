// Package deviceattribute_test reads a node's sysfs view through Kubernetes' own
// deviceattribute package, as a Go DRA driver publishes the standard attributes, and compares
// with what fakegpu's plugins publish from the same view (given by pytest).
package deviceattribute_test

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"k8s.io/dynamic-resource-allocation/deviceattribute"
)

type device struct {
	BusID    string  `json:"bus_id"`
	PcieRoot string  `json:"pcie_root"`
	Numa     int64   `json:"numa"`
	NumaList []int64 `json:"numa_list"`
}

func TestStandardAttributesFromTheView(t *testing.T) {
	root, path := os.Getenv("FAKEGPU_SYSFS"), os.Getenv("FAKEGPU_EXPECT_ATTRIBUTES")
	if root == "" || path == "" {
		t.Skip("FAKEGPU_SYSFS and FAKEGPU_EXPECT_ATTRIBUTES not set: run through tests/plugin/test_numa_list.py")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var devices []device
	if err := json.Unmarshal(data, &devices); err != nil {
		t.Fatal(err)
	}
	fs := deviceattribute.WithFSFromRoot(root)
	for _, d := range devices {
		pcieRoot, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(d.BusID, fs)
		if err != nil {
			t.Fatalf("%s: pcieRoot: %v", d.BusID, err)
		}
		if got := *pcieRoot.Value.StringValue; got != d.PcieRoot {
			t.Errorf("%s: pcieRoot %q, fakegpu publishes %q", d.BusID, got, d.PcieRoot)
		}
		scalar, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(d.BusID, deviceattribute.ScalarAttribute, fs)
		if err != nil {
			t.Fatalf("%s: numaNode: %v", d.BusID, err)
		}
		if got := *scalar.Value.IntValue; got != d.Numa {
			t.Errorf("%s: numaNode %d, fakegpu publishes %d", d.BusID, got, d.Numa)
		}
		list, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(d.BusID, deviceattribute.ListAttribute, fs)
		if err != nil {
			t.Fatalf("%s: numaNode list: %v", d.BusID, err)
		}
		if got := list.Value.IntValues; !reflect.DeepEqual(got, d.NumaList) {
			t.Errorf("%s: numaNode list %v, fakegpu publishes %v", d.BusID, got, d.NumaList)
		}
	}
}
