/*-------------------------------------------------------------------------
 *
 * spi.c
 *	  Saved SPI plans over the storage tables.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "store/store.h"

/* Runs a saved plan, preparing and keeping it on first use. */
int
ps_spi_run(SPIPlanPtr *plan, const char *sql, int nargs, Oid *argtypes,
		   Datum *values, bool read_only)
{
	int			rc;

	if (*plan == NULL)
	{
		SPIPlanPtr	p = SPI_prepare(sql, nargs, argtypes);

		if (p == NULL)
			elog(ERROR, "persist_sink: SPI_prepare failed for \"%s\": %s",
				 sql, SPI_result_code_string(SPI_result));
		SPI_keepplan(p);
		*plan = p;
	}
	rc = SPI_execute_plan(*plan, values, NULL, read_only, 0);
	if (rc < 0)
		elog(ERROR, "persist_sink: SPI failed for \"%s\": %s",
			 sql, SPI_result_code_string(rc));
	return rc;
}
