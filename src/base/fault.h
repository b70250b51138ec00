// Fault injection for crash tests: when the environment variable SBX_FAULT_POINT names a
// point, the process kills itself (SIGKILL) on reaching it. Off unless set. Any thread.
#pragma once

namespace sbx {

// Named points are written "operation.step", e.g. "snapshot.copied".
void FaultPoint(const char* name);

}  // namespace sbx
