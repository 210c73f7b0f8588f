package client

// ClassifyForTest is classify for the external tests (roundtrip_test.go),
// with the retry class by name.
func ClassifyForTest(err error) (error, string) {
	cerr, class, _ := classify(err)
	return cerr, [...]string{classFatal: "fatal", classNotLeader: "not leader", classRetry: "retry", classAmbiguous: "ambiguous", classMoved: "moved"}[class]
}
