package deploy

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// checkPodSecurity holds every pod to the restricted Pod Security
// Standard (as of Kubernetes 1.33; the baseline checks included), so that
// a namespace enforcing `restricted` admits them, and to what the
// standard leaves optional but shardcache asks: a read-only root file
// system, fsGroup where secrets are mounted (the image's nonroot user must
// read the 0400 files), and pods spread over hosts.
func checkPodSecurity(t *testing.T, ws []workload) {
	t.Helper()
	// The volume types the restricted profile allows.
	allowedVolumes := func(v corev1.Volume) bool {
		s := v.VolumeSource
		return s.ConfigMap != nil || s.CSI != nil || s.DownwardAPI != nil || s.EmptyDir != nil || s.Ephemeral != nil ||
			s.PersistentVolumeClaim != nil || s.Projected != nil || s.Secret != nil
	}
	for _, w := range ws {
		spec := w.template.Spec
		psc := spec.SecurityContext
		if psc == nil {
			psc = &corev1.PodSecurityContext{}
		}
		// Baseline: no host namespaces, ports or paths.
		if spec.HostNetwork || spec.HostPID || spec.HostIPC {
			t.Errorf("%s: shares a host namespace", w.name)
		}
		for _, v := range spec.Volumes {
			if !allowedVolumes(v) {
				t.Errorf("%s: volume %q is of a type the restricted profile refuses", w.name, v.Name)
			}
		}
		if psc.SELinuxOptions != nil && psc.SELinuxOptions.User+psc.SELinuxOptions.Role != "" {
			t.Errorf("%s: sets an SELinux user or role", w.name)
		}
		for _, s := range psc.Sysctls {
			t.Errorf("%s: sets sysctl %s", w.name, s.Name)
		}
		if psc.RunAsUser != nil && *psc.RunAsUser == 0 {
			t.Errorf("%s: runs as root (runAsUser 0)", w.name)
		}
		secrets := slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
			return v.Secret != nil || v.Projected != nil && slices.ContainsFunc(v.Projected.Sources, func(p corev1.VolumeProjection) bool { return p.Secret != nil })
		})
		if secrets && psc.FSGroup == nil {
			t.Errorf("%s: mounts a secret without fsGroup: its nonroot user cannot read the 0400 files", w.name)
		}
		if !slices.ContainsFunc(spec.TopologySpreadConstraints, func(c corev1.TopologySpreadConstraint) bool {
			return c.TopologyKey == "kubernetes.io/hostname" && c.MaxSkew == 1 && c.LabelSelector != nil && selects(t, c.LabelSelector, w.template.Labels)
		}) {
			t.Errorf("%s: no topology spread over hosts for its own pods", w.name)
		}
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			checkContainerSecurity(t, w.name+"/"+c.Name, c, psc)
		}
	}
}

// checkContainerSecurity checks one container, with its pod's context for
// the fields either may set.
func checkContainerSecurity(t *testing.T, name string, c corev1.Container, psc *corev1.PodSecurityContext) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil {
		t.Errorf("%s: no securityContext", name)
		return
	}
	for _, p := range c.Ports {
		if p.HostPort != 0 {
			t.Errorf("%s: host port %d", name, p.HostPort)
		}
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s: privileged", name)
	}
	if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
		t.Errorf("%s: procMount %s", name, *sc.ProcMount)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation is not false", name)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: the root file system is writable (readOnlyRootFilesystem)", name)
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: capabilities are not dropped (drop: [ALL])", name)
	} else if add := slices.DeleteFunc(slices.Clone(sc.Capabilities.Add), func(c corev1.Capability) bool { return c == "NET_BIND_SERVICE" }); len(add) > 0 {
		t.Errorf("%s: adds capabilities %v", name, add)
	}
	nonRoot := sc.RunAsNonRoot != nil && *sc.RunAsNonRoot || sc.RunAsNonRoot == nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
	if !nonRoot {
		t.Errorf("%s: runAsNonRoot is not true (pod or container)", name)
	}
	if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		t.Errorf("%s: runs as root (runAsUser 0)", name)
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil {
		seccomp = psc.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault && seccomp.Type != corev1.SeccompProfileTypeLocalhost {
		t.Errorf("%s: no seccomp profile RuntimeDefault or Localhost (pod or container)", name)
	}
	if sc.SELinuxOptions != nil && sc.SELinuxOptions.User+sc.SELinuxOptions.Role != "" {
		t.Errorf("%s: sets an SELinux user or role", name)
	}
	if sc.AppArmorProfile != nil && sc.AppArmorProfile.Type == corev1.AppArmorProfileTypeUnconfined {
		t.Errorf("%s: AppArmor unconfined", name)
	}
}

// secretFile checks that flag names a file of a mounted Secret volume.
func secretFile(t *testing.T, w workload, a map[string]string, flag string) {
	t.Helper()
	path := a[flag]
	c := w.template.Spec.Containers[0]
	for _, vm := range c.VolumeMounts {
		if !strings.HasPrefix(path, vm.MountPath+"/") {
			continue
		}
		for _, v := range w.template.Spec.Volumes {
			if v.Name == vm.Name && v.Secret != nil {
				return
			}
		}
	}
	t.Errorf("%s: --%s=%q is not a file of a mounted Secret", w.name, flag, path)
}
