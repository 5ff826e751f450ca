# Per-layer include roots. Every header is named from the repository root ("core/...",
# "server/..."), yet no library gets the repository root on its include path: each gets a
# folder of the build tree that links to just the layers it may use, so an include across
# layers does not compile ("server/status.h: No such file or directory" from core/). The
# layers (tests/layering_test.sh states the same rules for the source tree):
#   core      the engine                          core/
#   metrics   the Prometheus registry             server/metrics/
#   tokens    the token file (server and CLI)     server/tokens.h
#   workers   device workers                      workers/
#   server    the service                         server/
#   client    the CLI                             client/
#   launcher  the rank supervisor, anvil-run      launcher/, core/util/mutex.h
# A target also sees the roots of what it links (PUBLIC), e.g. server sees core's. Tests,
# benchmarks and fuzzers take the repository root, as they reach into every layer.
set(ANVIL_INCLUDE_ROOTS ${PROJECT_BINARY_DIR}/include_roots)

# anvil_include_root(LAYER PATH...): ${ANVIL_INCLUDE_ROOTS}/LAYER/PATH links to PATH of the
# source tree; the root folder's path is returned in ANVIL_INCLUDE_ROOT_<LAYER>.
function(anvil_include_root layer)
  set(root ${ANVIL_INCLUDE_ROOTS}/${layer})
  foreach(path ${ARGN})
    get_filename_component(parent ${root}/${path} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${path} ${root}/${path} SYMBOLIC)
  endforeach()
  set(ANVIL_INCLUDE_ROOT_${layer} ${root} PARENT_SCOPE)
endfunction()

anvil_include_root(core core)
anvil_include_root(metrics server/metrics)
anvil_include_root(tokens server/tokens.h)
anvil_include_root(workers workers)
anvil_include_root(server server)
anvil_include_root(client client)
# The launcher links nothing of the engine; it takes the engine's header-only annotated lock.
anvil_include_root(launcher launcher core/util/mutex.h)
