package eviction

import (
	"context"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type fakeImageFs string

func (f fakeImageFs) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{
		{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: string(f)}},
	}}, nil
}

func TestImageFsOnOwnDevice(t *testing.T) {
	root := t.TempDir()
	for mountpoint, want := range map[string]bool{t.TempDir(): false, "/proc": true} {
		got, err := ImageFsOnOwnDevice(fakeImageFs(mountpoint), root)(context.Background())
		if err != nil || got != want {
			t.Errorf("image fs at %s, root dir %s: %v, %v; want %v", mountpoint, root, got, err, want)
		}
	}
	if _, err := ImageFsOnOwnDevice(fakeImageFs(""), root)(context.Background()); err == nil {
		t.Error("no error without an image filesystem mount point")
	}
}
