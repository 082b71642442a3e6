# Install rules and the exported CMake package (included last by the top-level CMakeLists.txt,
# once every target exists).
#
#   bin/fusetune
#   lib/libfusetune_capi.so.<project version>, soname libfusetune_capi.so.<C ABI version>
#   include/fusetune/c_api.h
#   lib/pkgconfig/fusetune-capi.pc
#   lib/cmake/fusetune/               find_package(fusetune CONFIG): fusetune::capi
#   share/fusetune/dashboards/        Grafana dashboards and the Prometheus scrape config
# and with the service (FUSETUNE_WITH_SERVICE):
#   lib/libfusetune_client.a and the static libraries it is built from  (fusetune::client)
#   include/fusetune/client/config_cache.h, include/fusetune/wire/provenance.h,
#   include/fusetune/kernels/{problem,config,default_config}.h
#   lib/pkgconfig/fusetune-client.pc
#
# fusetune_client is static: its headers carry absl types and it has no ABI of its own to keep,
# so a consumer gets exactly the code its headers describe, linked against the same absl, gRPC
# and protobuf this build used (found again by fusetuneConfig.cmake).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(FUSETUNE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/fusetune)

# Installed binaries keep the directories of libraries found outside the system paths (the CUDA
# toolkit's cudart and cuBLAS) in their RUNPATH, as the build tree does.
set_target_properties(fusetune fusetune_capi PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

install(TARGETS fusetune RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set_target_properties(fusetune_capi PROPERTIES EXPORT_NAME capi)
install(TARGETS fusetune_capi EXPORT fusetuneTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/kernels/include/fusetune/c_api.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fusetune)

set(FUSETUNE_INSTALL_CLIENT OFF)
if(TARGET fusetune_client)
  set(FUSETUNE_INSTALL_CLIENT ON)
  # fusetune::client and the static libraries it links (exported so that the consumer's link
  # line has them; only the client's headers and what they include are installed).
  # The client needs the client-facing wire library only: no tuning records, no store.
  set(_fusetune_client_libraries fusetune_client fusetune_wire fusetune_wire_address fusetune_proto
      fusetune_kernels_core fusetune_base)
  # In link order (each before what it needs): the same list is fusetune-client.pc's Libs.
  set(FUSETUNE_PC_CLIENT_LIBS "")
  foreach(_lib IN LISTS _fusetune_client_libraries)
    string(REGEX REPLACE "^fusetune_" "" _name ${_lib})
    set_target_properties(${_lib} PROPERTIES EXPORT_NAME ${_name})
    string(APPEND FUSETUNE_PC_CLIENT_LIBS " -l${_lib}")
  endforeach()
  install(TARGETS ${_fusetune_client_libraries} EXPORT fusetuneTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(FILES ${PROJECT_SOURCE_DIR}/service/client/include/fusetune/client/config_cache.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fusetune/client)
  install(FILES ${PROJECT_SOURCE_DIR}/service/wire/include/fusetune/wire/provenance.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fusetune/wire)
  install(FILES ${PROJECT_SOURCE_DIR}/kernels/include/fusetune/kernels/problem.h
                ${PROJECT_SOURCE_DIR}/kernels/include/fusetune/kernels/config.h
                ${PROJECT_SOURCE_DIR}/kernels/include/fusetune/kernels/default_config.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fusetune/kernels)
endif()

install(EXPORT fusetuneTargets NAMESPACE fusetune:: DESTINATION ${FUSETUNE_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/fusetuneConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/fusetuneConfig.cmake
  INSTALL_DESTINATION ${FUSETUNE_INSTALL_CMAKEDIR})
# 0.x: a new minor version may change the C++ client's API.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/fusetuneConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/fusetuneConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/fusetuneConfigVersion.cmake
        DESTINATION ${FUSETUNE_INSTALL_CMAKEDIR})

# pkg-config files, relocatable: paths are relative to the .pc file (${pcfiledir}), so an
# install with `cmake --install build --prefix DIR` works wherever DIR is.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(FUSETUNE_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _fusetune_pc_up "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
  string(REGEX REPLACE "/$" "" _fusetune_pc_up "${_fusetune_pc_up}")
  set(FUSETUNE_PC_PREFIX "\${pcfiledir}/${_fusetune_pc_up}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(FUSETUNE_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(FUSETUNE_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(FUSETUNE_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(FUSETUNE_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
set(_fusetune_pc_files fusetune-capi)
if(FUSETUNE_INSTALL_CLIENT)
  list(APPEND _fusetune_pc_files fusetune-client)
endif()
foreach(_pc IN LISTS _fusetune_pc_files)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/${_pc}.pc.in ${CMAKE_CURRENT_BINARY_DIR}/${_pc}.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/${_pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()

install(DIRECTORY ${PROJECT_SOURCE_DIR}/dashboards/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/fusetune/dashboards)
