# What `make demo-cluster` suggests trying, one command per line, run from the repository
# root while the demo runs (test/e2e/demo_test.go runs exactly these lines).
hack/controlplane.sh kubectl get nodes,pods -o wide -A
hack/controlplane.sh kubectl logs deployment/hello
hack/controlplane.sh kubectl exec deployment/hello -- cat /tmp/index.html
hack/controlplane.sh kubectl port-forward deployment/hello 18080:8080 & sleep 2; curl -sS http://127.0.0.1:18080/ && kill $!
hack/controlplane.sh kubectl top node
hack/controlplane.sh kubectl top pod
hack/controlplane.sh kubectl get events -A --sort-by=.lastTimestamp
hack/controlplane.sh kubectl set env deployment/hello VERSION=2 && hack/controlplane.sh kubectl rollout status deployment/hello
hack/controlplane.sh kubectl delete pod -l app=hello
curl -sS http://$(hack/controlplane.sh kubectl get pod -l app=hello --field-selector=status.phase=Running -o jsonpath='{.items[0].status.podIP}'):8080/
