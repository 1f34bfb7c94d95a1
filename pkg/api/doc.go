// Package api groups what others call and the API-server side: the kubelet API on 10250
// (kubeletserver, its streaming), healthz and the local socket API (server) with its CLI,
// and the clients of the kube-apiserver (kubeclient, apiobjects, events).
// These packages may import every group below them; only pkg/app and cmd import them.
package api
