// Command kustomize55 renders a kustomization with the kustomize library
// kubectl 1.32 embeds (kustomize v5.5.0: sigs.k8s.io/kustomize/api
// v0.18.0), so that the deploy tests check the overlays render with it as
// well as with the newer library the tests use.
package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kustomize55 DIR")
		os.Exit(2)
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out, err := res.AsYaml()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Stdout.Write(out)
}
