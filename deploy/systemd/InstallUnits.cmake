# Run by `cmake --install`: writes each unit in SPOTDNN_UNIT_SOURCES to
# $DESTDIR<prefix>/lib/systemd/system with its /usr/local/ paths rewritten to the install prefix.
set(unit_dir "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/lib/systemd/system")
file(MAKE_DIRECTORY "${unit_dir}")
foreach(unit IN LISTS SPOTDNN_UNIT_SOURCES)
  file(READ "${unit}" text)
  string(REPLACE "/usr/local/" "${CMAKE_INSTALL_PREFIX}/" text "${text}")
  get_filename_component(name "${unit}" NAME)
  message(STATUS "Installing: ${unit_dir}/${name}")
  file(WRITE "${unit_dir}/${name}" "${text}")
endforeach()
