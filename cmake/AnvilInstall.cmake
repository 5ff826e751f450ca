# `cmake --install`: the engine's headers and static libraries with a CMake package
# (find_package(Anvil CONFIG) -> Anvil::core, Anvil::nn, Anvil::distributed, Anvil::optim, Anvil::data,
# Anvil::train, Anvil::models) and a pkg-config file (anvil.pc), and anvild and the anvil
# CLI when the service is built. Headers keep their repository paths under include/anvil
# ("core/tensor/tensor.h"), the include directory users get. tests/install_test.sh builds
# examples/ as an outside project against an installed tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ANVIL_ENGINE_LIBRARIES anvil_core anvil_data anvil_nn anvil_quant anvil_distributed anvil_optim anvil_train anvil_models)
foreach(lib IN LISTS ANVIL_ENGINE_LIBRARIES)
  string(REPLACE "anvil_" "" short ${lib})
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${short})
  add_library(Anvil::${short} ALIAS ${lib})
endforeach()
set(ANVIL_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/anvil)
target_include_directories(anvil_core INTERFACE $<INSTALL_INTERFACE:${ANVIL_INSTALL_INCLUDEDIR}>)

install(TARGETS ${ANVIL_ENGINE_LIBRARIES} EXPORT AnvilTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${ANVIL_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/core/ DESTINATION ${ANVIL_INSTALL_INCLUDEDIR}/core
        FILES_MATCHING PATTERN "*.h" PATTERN "*.def" PATTERN "*.cuh")
install(EXPORT AnvilTargets NAMESPACE Anvil:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Anvil)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/AnvilConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/AnvilConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Anvil)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/AnvilConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/AnvilConfig.cmake ${PROJECT_BINARY_DIR}/AnvilConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Anvil)

# pkg-config: the libraries in link order (static), then what they need from the system.
set(ANVIL_PC_CFLAGS "")
set(ANVIL_PC_LIBS_EXTRA "-lz -lstb -lgloo -pthread -ldl")
if(ANVIL_WITH_CUDA)
  set(ANVIL_PC_CFLAGS "-DANVIL_WITH_CUDA=1")
  set(ANVIL_PC_LIBS_EXTRA "${ANVIL_PC_LIBS_EXTRA} -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -lrt")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/anvil.pc.in ${PROJECT_BINARY_DIR}/anvil.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/anvil.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

if(ANVIL_BUILD_SERVICE)
  install(TARGETS anvild anvil RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
