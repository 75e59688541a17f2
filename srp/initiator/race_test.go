//go:build race

package initiator_test

const raceEnabled = true
