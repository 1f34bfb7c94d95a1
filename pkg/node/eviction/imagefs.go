package eviction

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ImageFsInfoer is the part of the CRI image service ImageFsOnOwnDevice asks.
type ImageFsInfoer interface {
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
}

// ImageFsOnOwnDevice returns a Deps.HasDedicatedImageFs that compares the
// device of the runtime's (first) image filesystem with that of rootDir,
// as upstream's CRI stats provider does.
func ImageFsOnOwnDevice(images ImageFsInfoer, rootDir string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		resp, err := images.ImageFsInfo(ctx)
		if err != nil {
			return false, err
		}
		fss := resp.GetImageFilesystems()
		if len(fss) == 0 || fss[0].GetFsId().GetMountpoint() == "" {
			return false, errors.New("the runtime reports no image filesystem mount point")
		}
		imageDev, err := device(fss[0].GetFsId().GetMountpoint())
		if err != nil {
			return false, err
		}
		rootDev, err := device(rootDir)
		if err != nil {
			return false, err
		}
		return imageDev != rootDev, nil
	}
}

func device(path string) (uint64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("no device for %s", path)
	}
	return uint64(st.Dev), nil
}
