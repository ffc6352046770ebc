"""The PromQL wing's window sources, one module per way of reading a window (docs/architecture.md, The PromQL wing):
:mod:`.samples`, :mod:`.exact_increase`, :mod:`.recording_rules`, :mod:`.boundary_scrapes`; :mod:`.cross_check` checks
the exact increase's first windows against the samples."""
