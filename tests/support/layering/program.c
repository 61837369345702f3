/* Links the probe room with every room above it; never run. */
int probe_call(void);
int main(void) { return probe_call() == 12345; }
