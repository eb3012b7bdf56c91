# The shared file-system engine, compiled into each storage module that
# includes this file (posix, sharedfs): one copy of the code in the tree,
# one private copy of the objects per module.
set(DCP_FSIO_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/fsio.c
  ${CMAKE_CURRENT_LIST_DIR}/fsio_file.c
  ${CMAKE_CURRENT_LIST_DIR}/fsio_meta.c)
find_package(Threads REQUIRED)
