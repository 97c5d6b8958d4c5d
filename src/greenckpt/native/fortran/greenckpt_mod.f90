! greenckpt_mod.f90 - the phase API of greenckpt.h for Fortran (ISO_C_BINDING).
!
! Why a source file and not a compiled module: a .mod file belongs to one Fortran compiler
! and version, so the application compiles this file with its own compiler:
!
!     mpifort $(greenckpt config --fortran-module) app.f90 $(greenckpt config --libs)
!
! The functions return the C API's statuses (GREENCKPT_OK, GREENCKPT_NO_RUNTIME, or a negative
! error, which libgreenckpt also reports in one line on stderr); sizes are 64-bit integers.
! Paths are Fortran strings; trailing blanks are not part of the path. Where C returns a
! `const char *`, these return a Fortran string ('' for C's NULL). Every function of
! greenckpt.h is here under its C name (tests/native/test_fortran_parity.py checks it); the
! collective helpers of greenckpt_mpi.h are in greenckpt_mpi_mod.f90 (module greenckpt_mpi).
module greenckpt
  use, intrinsic :: iso_c_binding, only: c_int, c_int64_t, c_char, c_null_char, c_ptr, &
       c_size_t, c_f_pointer, c_associated
  implicit none
  private

  integer, parameter, public :: GREENCKPT_CHECKPOINT = 0, GREENCKPT_RESTART = 1, &
       GREENCKPT_FLUSH = 2, GREENCKPT_REWORK = 3, GREENCKPT_COMPUTE = 4
  integer, parameter, public :: GREENCKPT_NO_LEVEL = 0, GREENCKPT_MAX_LEVEL = 4
  integer, parameter, public :: GREENCKPT_OK = 0, GREENCKPT_NO_RUNTIME = 1, &
       GREENCKPT_EINVAL = -1, GREENCKPT_ESTATE = -2, GREENCKPT_EFORK = -3, &
       GREENCKPT_ERUNTIME = -4
  integer, parameter, public :: greenckpt_size_kind = c_int64_t

  public :: greenckpt_begin, greenckpt_end, greenckpt_io_processes, greenckpt_attached, &
       greenckpt_set_node, greenckpt_strerror, greenckpt_last_error, greenckpt_kind_name

  interface
     function c_begin(kind, level, path, bytes, io_processes) result(status) &
          bind(C, name="greenckpt_begin")
       import :: c_int, c_int64_t, c_char
       integer(c_int), value :: kind, level
       character(kind=c_char), dimension(*), intent(in) :: path
       integer(c_int64_t), value :: bytes
       integer(c_int), intent(out) :: io_processes
       integer(c_int) :: status
     end function c_begin

     function c_end(kind, ok) result(status) bind(C, name="greenckpt_end")
       import :: c_int
       integer(c_int), value :: kind, ok
       integer(c_int) :: status
     end function c_end

     function c_io_processes(kind) result(n) bind(C, name="greenckpt_io_processes")
       import :: c_int
       integer(c_int), value :: kind
       integer(c_int) :: n
     end function c_io_processes

     function c_attached() result(yes) bind(C, name="greenckpt_attached")
       import :: c_int
       integer(c_int) :: yes
     end function c_attached

     function c_set_node(node) result(status) bind(C, name="greenckpt_set_node")
       import :: c_int
       integer(c_int), value :: node
       integer(c_int) :: status
     end function c_set_node

     function c_strerror(status) result(text) bind(C, name="greenckpt_strerror")
       import :: c_int, c_ptr
       integer(c_int), value :: status
       type(c_ptr) :: text
     end function c_strerror

     function c_last_error() result(text) bind(C, name="greenckpt_last_error")
       import :: c_ptr
       type(c_ptr) :: text
     end function c_last_error

     function c_kind_name(kind) result(text) bind(C, name="greenckpt_kind_name")
       import :: c_int, c_ptr
       integer(c_int), value :: kind
       type(c_ptr) :: text
     end function c_kind_name

     function c_strlen(text) result(n) bind(C, name="strlen")
       import :: c_ptr, c_size_t
       type(c_ptr), value :: text
       integer(c_size_t) :: n
     end function c_strlen
  end interface

contains

  !> A phase of `kind` starts (see greenckpt.h); `bytes`: what this process moves.
  integer function greenckpt_begin(kind, level, path, bytes, io_processes) result(status)
    integer, intent(in) :: kind, level
    character(len=*), intent(in) :: path
    integer(c_int64_t), intent(in) :: bytes
    integer, intent(out), optional :: io_processes
    integer(c_int) :: io
    status = int(c_begin(int(kind, c_int), int(level, c_int), trim(path)//c_null_char, &
         bytes, io))
    if (present(io_processes)) io_processes = int(io)
  end function greenckpt_begin

  !> The innermost phase this thread began, of `kind`, is over; `ok` false when it failed.
  integer function greenckpt_end(kind, ok) result(status)
    integer, intent(in) :: kind
    logical, intent(in) :: ok
    integer(c_int) :: flag
    flag = 0
    if (ok) flag = 1
    status = int(c_end(int(kind, c_int), flag))
  end function greenckpt_end

  !> The advice of the open phase of `kind` (processes writing at once), or 0.
  integer function greenckpt_io_processes(kind) result(n)
    integer, intent(in) :: kind
    n = int(c_io_processes(int(kind, c_int)))
  end function greenckpt_io_processes

  !> Whether a runtime listens.
  logical function greenckpt_attached() result(yes)
    yes = c_attached() /= 0
  end function greenckpt_attached

  !> This process's node index in the job (>= 0).
  integer function greenckpt_set_node(node) result(status)
    integer, intent(in) :: node
    status = int(c_set_node(int(node, c_int)))
  end function greenckpt_set_node

  !> A constant text for a status (C's greenckpt_strerror), as a Fortran string.
  function greenckpt_strerror(status) result(text)
    integer, intent(in) :: status
    character(len=:), allocatable :: text
    text = fortran_string(c_strerror(int(status, c_int)))
  end function greenckpt_strerror

  !> This thread's last error message ('' if none), without the C string's terminator.
  function greenckpt_last_error() result(text)
    character(len=:), allocatable :: text
    text = fortran_string(c_last_error())
  end function greenckpt_last_error

  !> The wire name of a kind ('checkpoint', ...), or '' for an unknown kind (C's NULL).
  function greenckpt_kind_name(kind) result(text)
    integer, intent(in) :: kind
    character(len=:), allocatable :: text
    text = fortran_string(c_kind_name(int(kind, c_int)))
  end function greenckpt_kind_name

  !> A C string as a Fortran string of its length ('' for NULL).
  function fortran_string(p) result(text)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: text
    character(kind=c_char), pointer :: chars(:)
    integer :: n
    if (.not. c_associated(p)) then
       text = ''
       return
    end if
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: text)
    text = transfer(chars(1:n), text)
  end function fortran_string

end module greenckpt
