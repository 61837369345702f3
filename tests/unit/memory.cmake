# The memory room's tests: the ledger test parses the timeline JSON with jansson.
target_link_libraries(memory_ledger PRIVATE PkgConfig::JANSSON)
