package workload

import "strconv"

func strconvI(n int) string { return strconv.Itoa(n) }
