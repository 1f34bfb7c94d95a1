// Command etcd is upstream's etcd server, built from the module version go.mod pins
// (go.etcd.io/etcd/server/v3) for the test control plane that hack/controlplane.sh runs.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
