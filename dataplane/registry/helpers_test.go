package registry

import "runtime"

func runtimeGosched() { runtime.Gosched() }
