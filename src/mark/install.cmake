# Packaging for other engines: the library, the two public marker headers,
# a CMake package (find_package(phasemark) -> phasemark::phasemark) and a
# pkg-config file.
include(CMakePackageConfigHelpers)

install(TARGETS phasemark EXPORT phasemarkTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT phasemark
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT phasemark
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT phasemark
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/phasemark/mark.h
              ${PROJECT_SOURCE_DIR}/include/phasemark/mark.hpp
              ${PROJECT_SOURCE_DIR}/include/phasemark/phase.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/phasemark COMPONENT phasemark)

set(PM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/phasemark)
install(EXPORT phasemarkTargets NAMESPACE phasemark:: DESTINATION ${PM_CMAKE_DIR}
        COMPONENT phasemark)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/phasemarkConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/phasemarkConfig.cmake INSTALL_DESTINATION ${PM_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/phasemarkConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/phasemarkConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/phasemarkConfigVersion.cmake
        DESTINATION ${PM_CMAKE_DIR} COMPONENT phasemark)

# Markers compiled out: consumers of the pkg-config file get the switch too.
if(PHASEMARK_MARKERS)
  set(PM_PC_CFLAGS "")
else()
  set(PM_PC_CFLAGS "-DPHASEMARK_DISABLED")
endif()
# The prefix is found relative to the .pc file, so the package can be
# installed anywhere (cmake --install --prefix) after configuration.
file(RELATIVE_PATH PM_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" PM_PC_TO_PREFIX "${PM_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/phasemark.pc.in
  ${CMAKE_CURRENT_BINARY_DIR}/phasemark.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/phasemark.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT phasemark)
