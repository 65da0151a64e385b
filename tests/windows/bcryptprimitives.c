/* For the tests under Wine 8.0 only (never shipped): the one export of
   bcryptprimitives.dll that Rust's standard library imports, ProcessPrng, over
   RtlGenRandom (advapi32's SystemFunction036). Windows 10 and newer ship the real DLL;
   Wine 8.0 lacks it. Built with zig by .ci/wine-env (for .ci/windows-cli and
   .ci/windows-unit) and by tests/pi_windows.rs. */
#include <windows.h>
BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length) {
    while (length > 0) {
        ULONG n = length > 0x10000000 ? 0x10000000 : (ULONG)length;
        if (!SystemFunction036(data, n)) return FALSE;
        data += n;
        length -= n;
    }
    return TRUE;
}
