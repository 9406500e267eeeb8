/* version.c — the runtime's version string (keeps libzrt non-empty). */
const char* zrt_version(void) { return "zipccl-runtime 0.1"; }
