// Where the tests find the trees they were configured from: the source tree (scripts, golden
// files, the peers' venv, fetched datasets) and the build tree (helper libraries).
//
// Only tests/paths.cc is compiled with the paths in it. A path in any other test file's
// compile line would make its object depend on where the tree is, and a clean clone in another
// folder would compile every test again instead of taking it from the compiler cache.
#pragma once

#include <string>

namespace anvil::test {

const std::string& SourceDir();
const std::string& BinaryDir();
// The peers' Python (scripts/install-test-peers.sh makes .venv in the source tree).
std::string PeerPython();
// The datasets `make data` fetches (scripts/fetch-data.sh), in the source tree.
std::string TestDataDir();
// The stand-in NVIDIA driver library the GPU metrics tests load (tests/server), or "" when the
// service is not built.
const std::string& FakeNvmlPath();

}  // namespace anvil::test
