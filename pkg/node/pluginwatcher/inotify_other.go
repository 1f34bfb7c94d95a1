//go:build !linux

package pluginwatcher

import "errors"

func newNotifier() (notifier, error) {
	return nil, errors.New("watching the plugin registry is only supported on Linux")
}
