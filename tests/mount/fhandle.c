/* fhandle.c -- keg_fhandle: file handles for the mount suite (name_to_handle_at / open_by_handle_at).
 *
 *   keg_fhandle save PATH FILE      write PATH's handle to FILE
 *   keg_fhandle cat MOUNTDIR FILE   open the handle in FILE (O_RDONLY) through any path of
 *                                   the mount, print the file's bytes (a directory: its
 *                                   entries, one per line, sorted by the caller)
 *
 * Exit status: 0, 1 on an error (the message names the errno, e.g. "ESTALE"), 2 usage.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(const char *what)
{
    int e = errno;
    fprintf(stderr, "keg_fhandle: %s: %s (%s)\n", what, strerror(e),
            e == ESTALE ? "ESTALE" : e == ENOENT ? "ENOENT" : "other");
    return 1;
}

static int save(const char *path, const char *file)
{
    char buf[sizeof(struct file_handle) + MAX_HANDLE_SZ];
    struct file_handle *fh = (struct file_handle *)buf;
    int mount_id;
    fh->handle_bytes = MAX_HANDLE_SZ;
    if (name_to_handle_at(AT_FDCWD, path, fh, &mount_id, 0) < 0)
        return fail("name_to_handle_at");
    FILE *f = fopen(file, "we");
    if (!f)
        return fail(file);
    size_t n = sizeof(*fh) + fh->handle_bytes;
    if (fwrite(fh, 1, n, f) != n || fclose(f) != 0)
        return fail(file);
    return 0;
}

static int cat(const char *mountdir, const char *file)
{
    char buf[sizeof(struct file_handle) + MAX_HANDLE_SZ];
    struct file_handle *fh = (struct file_handle *)buf;
    FILE *f = fopen(file, "re");
    if (!f)
        return fail(file);
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    if (n < sizeof(*fh) || n != sizeof(*fh) + fh->handle_bytes) {
        fprintf(stderr, "keg_fhandle: %s: not a saved handle\n", file);
        return 1;
    }
    int mfd = open(mountdir, O_RDONLY | O_DIRECTORY);
    if (mfd < 0)
        return fail(mountdir);
    int fd = open_by_handle_at(mfd, fh, O_RDONLY);
    if (fd < 0)
        return fail("open_by_handle_at");
    struct stat st;
    if (fstat(fd, &st) < 0)
        return fail("fstat");
    if (S_ISDIR(st.st_mode)) {
        DIR *d = fdopendir(fd);
        struct dirent *de;
        if (!d)
            return fail("fdopendir");
        errno = 0;
        while ((de = readdir(d)) != NULL)
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                printf("%s\n", de->d_name);
        if (errno)
            return fail("readdir");
        closedir(d);
        return 0;
    }
    char data[65536];
    ssize_t r;
    while ((r = read(fd, data, sizeof(data))) > 0)
        if (fwrite(data, 1, (size_t)r, stdout) != (size_t)r)
            return fail("stdout");
    if (r < 0)
        return fail("read");
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "save") == 0)
        return save(argv[2], argv[3]);
    if (argc == 4 && strcmp(argv[1], "cat") == 0)
        return cat(argv[2], argv[3]);
    fprintf(stderr, "usage: keg_fhandle save PATH FILE | cat MOUNTDIR FILE\n");
    return 2;
}
