package config

// KubernetesConfig is the [kubernetes] table: what gpu-kubelet-plugin, the DRA driver,
// publishes about the devices of the node.
type KubernetesConfig struct {
	// TaintEffect is the effect of the taint an unhealthy device is published with:
	// TaintNoSchedule (no new pod gets it; running ones keep it) or TaintNoExecute (pods using
	// it are also evicted).
	TaintEffect string `toml:"taint-effect"`
}

// The values of kubernetes.taint-effect, as Kubernetes spells device taint effects.
const (
	TaintNoSchedule = "NoSchedule"
	TaintNoExecute  = "NoExecute"
)

// clean validates the [kubernetes] table.
func (k *KubernetesConfig) clean(bad func(key string, value any, want string)) {
	if k.TaintEffect != TaintNoSchedule && k.TaintEffect != TaintNoExecute {
		bad("kubernetes.taint-effect", k.TaintEffect, `"NoSchedule" (unhealthy devices get no new pods) or "NoExecute" (pods using them are evicted too)`)
	}
}
