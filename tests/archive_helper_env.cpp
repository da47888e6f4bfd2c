// Test and benchmark binaries live in subdirectories of the build tree, not
// next to agentbox-archive: point the archive client at the helper that was
// built with them (an AGENTBOX_ARCHIVE_HELPER already set wins).
#include <cstdlib>

namespace {
const int kSet = (setenv("AGENTBOX_ARCHIVE_HELPER", AGENTBOX_TEST_ARCHIVE_HELPER, 0), 0);
}
