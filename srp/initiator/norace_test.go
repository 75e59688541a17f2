//go:build !race

package initiator_test

const raceEnabled = false
