// Package pluginwatcher is nodelet's plugin manager, upstream's pkg/kubelet/pluginmanager
// (pluginwatcher, cache, reconciler, operationexecutor and metrics) in one package.
//
// Node plugins (CSI drivers, DRA drivers) announce themselves by creating a unix socket
// serving the pluginregistration v1 Registration service in the registry directory,
// <root-dir>/plugins_registry. The watcher (inotify, plus a walk at start-up, both
// recursive) keeps the desired state: the sockets that exist, each stamped anew when it is
// (re-)created. Once a second a reconciler makes the actual state match: it asks a new
// socket for its PluginInfo, hands it to the Handler registered for its type (Validate,
// then Register), tells the plugin the outcome (NotifyRegistrationStatus), and calls
// DeRegister when the socket goes away or is replaced. Operations on one socket never
// overlap, and a failed one is retried after an exponentially growing delay.
//
// The number of plugins in each state is exported as upstream's
// plugin_manager_total_plugins gauge (see Manager.Collector).
package pluginwatcher
